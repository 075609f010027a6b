// fuzz_env.cpp — libFuzzer target: the launcher environment derivation. The first four bytes
// give MPI's view (rank, world, node-local rank/size, node count); the rest is lines of
// KEY=VALUE, the launcher variables as mpirun, srun or a broken job script would set them.
// Contract: an Identity consistent with MPI (MPI is authoritative for rank and world), or one
// UserError that says what disagrees; launch_problem_before_mpi never throws.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/launch/identity.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return 0;
  const int world = 1 + data[0] % 64;
  const int rank = data[1] % world;
  mnist_ddp::MpiLocality mpi;
  mpi.local_size = 1 + data[2] % world;
  mpi.local_rank = data[3] % mpi.local_size;
  mpi.num_nodes = (world + mpi.local_size - 1) / mpi.local_size;
  mpi.node = rank / mpi.local_size;
  mnist_ddp::EnvMap env;
  std::string line;
  for (std::size_t i = 4; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      const auto eq = line.find('=');
      if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
      line.clear();
    } else {
      line.push_back(static_cast<char>(data[i]));
    }
  }
  (void)mnist_ddp::launch_problem_before_mpi(env);
  try {
    const mnist_ddp::Identity id = mnist_ddp::derive_identity(rank, world, mpi, env, "node0", 42);
    mnist_ddp::check_local_rank(id);
    if (id.rank != rank || id.world != world) __builtin_trap();
    if (id.local_rank < 0 || id.local_rank >= id.local_size) __builtin_trap();
    if (id.node < 0 || id.node >= id.num_nodes) __builtin_trap();
  } catch (const mnist_ddp::UserError& e) {
    mnist_ddp::fuzz::require_clear_error(e.what(), "");
  }
  return 0;
}
