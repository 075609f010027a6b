// file_crc.hpp — the file CRC of every checkpoint and weights file: its first 512 bytes are an
// HDF5 user block (HDF5, h5py and h5dump skip it) holding one line, "mnist_ddp-file-crc32 XXXXXXXX
// size N": the CRC32 of every byte after the block. A load checks it before HDF5 parses anything,
// so a damaged file never reaches HDF5's own parser (which in Debian's HDF5 1.10 reads out of
// bounds on some corrupt metadata). Private to src/checkpoint/.
#pragma once

#include <cstddef>
#include <string>

namespace mnist_ddp {

// The user block's size: the HDF5 file is created with it (H5Pset_userblock).
inline constexpr std::size_t kFileCrcBlock = 512;

// Writes the line over the block of a closed file (its final bytes). UserError when it cannot.
void stamp_file_crc(const std::string& path);

// Checks the line; a file without one is refused too (HDF5 would otherwise parse unverified
// bytes). UserError saying what does not match.
void verify_file_crc(const std::string& path);

}  // namespace mnist_ddp
