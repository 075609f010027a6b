// fuzz_common.cpp — the error contract and the scratch file of the fuzz targets.
#include "fuzz_common.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace mnist_ddp::fuzz {

void require_clear_error(const std::string& message, const std::string& must_name) {
  if (message.empty() || message.find(must_name) == std::string::npos) {
    std::fprintf(stderr, "fuzz contract: error does not name '%s': '%s'\n", must_name.c_str(),
                 message.c_str());
    std::abort();
  }
}

std::string write_scratch(const std::uint8_t* data, std::size_t size, const std::string& suffix) {
  // /dev/shm when there is one: the parsers read a real file without touching the disk.
  const std::filesystem::path dir =
      std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
  const std::string path = (dir / ("mnist_ddp_fuzz_" + std::to_string(getpid()) + suffix)).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

}  // namespace mnist_ddp::fuzz
