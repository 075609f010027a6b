// world.hpp — what the MPI test files share: the world communicator (made in mpi_main.cpp after
// MPI_Init, destroyed there before MPI_Finalize), a synthetic dataset and a per-job temp directory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/data/dataset.hpp"

namespace mnist_ddp {

// The world communicator of the MPI tests.
Comm& world();
// mpi_main.cpp sets it after MPI_Init and resets it (nullptr) before MPI_Finalize.
void set_world(std::unique_ptr<Comm> comm);

// A synthetic dataset: deterministic random pixels and labels.
DataSplit synthetic(int train, int test, std::uint64_t seed);

// A directory for logs, the same on every rank of this job (removed by mpi_main.cpp).
std::string temp_log_dir();

}  // namespace mnist_ddp
