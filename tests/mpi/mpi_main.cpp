// mpi_main.cpp — the GoogleTest main of the MPI suite (run under mpirun -np 2 and -np 4
// --oversubscribe): MPI_Init, the world communicator, only rank 0 prints, any rank's failure fails
// the suite, then the world communicator and MPI are torn down in that order.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "mnist_ddp/runtime/check.hpp"
#include "mnist_ddp/runtime/identity.hpp"
#include "world.hpp"

int main(int argc, char** argv) {
  mnist_ddp::mpi_init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mnist_ddp::set_error_identity(rank, mnist_ddp::host_name());
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  mnist_ddp::set_world(mnist_ddp::make_mpi_comm());
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  mnist_ddp::set_world(nullptr);
  // Collective: the suite fails if any rank saw a failure (rank 0 alone prints).
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && failed) std::printf("mpi_tests: a failure was reported on at least one rank\n");
  std::error_code ec;
  if (rank == 0)
    std::filesystem::remove_all(
        std::filesystem::temp_directory_path() / ("mnist_ddp_mpi_" + std::to_string(getppid())),
        ec);
  MPI_Finalize();
  return failed;
}
