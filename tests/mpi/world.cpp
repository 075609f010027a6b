// world.cpp — the MPI tests' shared helpers (world.hpp).
#include "world.hpp"

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <utility>

#include "mnist_ddp/base/rng.hpp"

namespace mnist_ddp {

namespace {
// Made after MPI_Init and reset before MPI_Finalize by mpi_main.cpp (its user-defined MPI ops are
// freed with it), never a function-local static.
std::unique_ptr<Comm> g_world;
}  // namespace

Comm& world() {
  return *g_world;
}
void set_world(std::unique_ptr<Comm> comm) {
  g_world = std::move(comm);
}

DataSplit synthetic(int train, int test, std::uint64_t seed) {
  DataSplit d;
  SplitMix64 r(seed);
  for (Dataset* s : {&d.train, &d.test}) {
    s->count = s == &d.train ? train : test;
    s->images.resize(static_cast<std::size_t>(s->count) * kImagePixels);
    s->labels.resize(static_cast<std::size_t>(s->count));
    for (auto& p : s->images) p = static_cast<std::uint8_t>(r.below(256));
    for (auto& l : s->labels) l = static_cast<std::uint8_t>(r.below(10));
  }
  d.mean = 0.5f;
  d.std = 0.3f;
  d.name = "synthetic";
  return d;
}

std::string temp_log_dir() {
  return (std::filesystem::temp_directory_path() / ("mnist_ddp_mpi_" + std::to_string(getppid())))
      .string();
}

}  // namespace mnist_ddp
