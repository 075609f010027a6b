// file_crc.cpp — the file CRC line in a checkpoint's user block (file_crc.hpp).
#include "file_crc.hpp"

#include <zlib.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

constexpr std::size_t kUserBlock = kFileCrcBlock;
constexpr const char* kFileCrcTag = "mnist_ddp-file-crc32 ";

std::uint32_t crc_of_file_after(const std::string& path, std::size_t from, std::uint64_t* size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("{}: cannot be read: {}", path, std::strerror(errno)));
  in.seekg(static_cast<std::streamoff>(from));
  uLong c = crc32(0L, Z_NULL, 0);
  std::vector<char> buf(1 << 16);
  std::uint64_t n = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    c = crc32(c, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(got));
    n += got;
  }
  *size = n;
  return static_cast<std::uint32_t>(c);
}

}  // namespace

void stamp_file_crc(const std::string& path) {
  std::uint64_t size = 0;
  const std::uint32_t crc = crc_of_file_after(path, kUserBlock, &size);
  std::string line = fmt::format("{}{:08x} size {}\n", kFileCrcTag, crc, size);
  line.resize(kUserBlock, '\0');
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.write(line.data(), static_cast<std::streamsize>(line.size()));
  f.flush();
  if (!f) throw UserError(fmt::format("{}: writing its file CRC failed", path));
}

void verify_file_crc(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("cannot be read: {}", std::strerror(errno)));
  std::string head(kUserBlock, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  if (in.gcount() != static_cast<std::streamsize>(kUserBlock)) {
    throw UserError(
        fmt::format("the file is {} bytes, shorter than a checkpoint's {}-byte header: "
                    "truncated or not a checkpoint",
                    std::max<std::streamsize>(in.gcount(), 0), kUserBlock));
  }
  if (head.rfind(kFileCrcTag, 0) != 0) {
    throw UserError(
        "no file CRC line at its start (every checkpoint and weights file mnist_ddp writes "
        "begins with one): damaged, not written by mnist_ddp, or written before the line existed; "
        "unverified bytes are not handed to HDF5. For a file you trust: "
        "tools/stamp_file_crc.py FILE");
  }
  unsigned crc = 0;
  unsigned long long size = 0;
  if (std::sscanf(head.c_str() + std::strlen(kFileCrcTag), "%8x size %llu", &crc, &size) != 2) {
    throw UserError("its file CRC line is damaged: the file is corrupt");
  }
  std::uint64_t actual_size = 0;
  const std::uint32_t actual = crc_of_file_after(path, kUserBlock, &actual_size);
  if (actual_size != size) {
    throw UserError(
        fmt::format("{} bytes after the header where {} were written: truncated or "
                    "damaged",
                    actual_size, size));
  }
  if (actual != crc) throw UserError("file CRC32 mismatch: the file is corrupt");
}

}  // namespace mnist_ddp
