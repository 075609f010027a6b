// fuzz_idx.cpp — libFuzzer target: the IDX reader (raw and gzip) on any bytes. The first byte
// picks images (even) or labels (odd); the rest is the file, read through the same path as
// training (gzip detected from the content). Contract: parsed, or a UserError naming the file.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.hpp"
#include "mnist_ddp/data/idx.hpp"
#include "mnist_ddp/diagnostics/check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool labels = (data[0] & 1) != 0;
  const std::string path = mnist_ddp::fuzz::write_scratch(data + 1, size - 1, ".idx");
  try {
    if (labels) {
      const auto l = mnist_ddp::read_idx_labels(path);
      // A file that parses holds exactly what its header says, every label a class.
      if (static_cast<std::size_t>(l.count) != l.labels.size()) __builtin_trap();
      for (auto v : l.labels)
        if (v > 9) __builtin_trap();
    } else {
      const auto im = mnist_ddp::read_idx_images(path);
      if (static_cast<std::size_t>(im.count) * 28 * 28 != im.pixels.size()) __builtin_trap();
    }
  } catch (const mnist_ddp::UserError& e) {
    mnist_ddp::fuzz::require_clear_error(e.what(), path);
  }
  return 0;
}
