// idx.hpp — reader for the IDX format of MNIST / Fashion-MNIST (raw or gzip-compressed), with
// validation of magic, number of dimensions, dims (28x28), file length and label range. Every
// failure is a UserError naming the file and what is wrong.
//
// IDX: 4-byte magic {0, 0, type, ndims} (type 0x08 = unsigned byte), ndims big-endian uint32
// sizes, then the payload in row-major order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mnist_ddp {

struct IdxImages {
  int count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<std::uint8_t> pixels;  // [count][rows][cols]
};

struct IdxLabels {
  int count = 0;
  std::vector<std::uint8_t> labels;  // [count], each in 0..9
};

// Reads the whole file, decompressing if it is gzip (detected from the content, not the name).
// idx_ndims > 0: the file is an IDX file of that many dims, and reading stops one byte past the
// size its header declares (a gzip bomb or a wrong file cannot allocate without bound).
std::vector<std::uint8_t> read_maybe_gz(const std::string& path, int idx_ndims = 0);

// Parse + validate from bytes already in memory (`path` only names the source in errors).
IdxImages parse_idx_images(const std::vector<std::uint8_t>& bytes, const std::string& path);
IdxLabels parse_idx_labels(const std::vector<std::uint8_t>& bytes, const std::string& path);

IdxImages read_idx_images(const std::string& path);
IdxLabels read_idx_labels(const std::string& path);

}  // namespace mnist_ddp
