// nccl_test.cu — GPU tests of the NCCL communicator (built with CUDA, run under mpirun; each test
// skips with the reason when this process has no GPU, or when ranks would have to share one, which
// NCCL refuses): bootstrap from an MPI-broadcast unique id, closed-form all-reduce, broadcast,
// all-gather and the sum-then-divide average, all on device memory; the bucketed, overlapped
// Reducer on the NCCL stream, eager and captured in a CUDA graph.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "../common/gpu_probe.hpp"
#include "mnist_ddp/comm/agree.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/reducer.hpp"
#include "mnist_ddp/diagnostics/cuda/cuda_check.hpp"
#include "mnist_ddp/launch/device.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/ops/step_graph.hpp"

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
  if (!ok) *why = "fewer GPUs than ranks (NCCL needs one GPU per rank)";
  return ok != 0;
}

// The trainer's capture hooks for a bare Reducer: its bookkeeping and the communicator's are put
// back after a failed capture; the agreement runs over host MPI.
CaptureHooks reducer_hooks(Reducer& reducer, Comm& model_comm, Comm& host_comm, Reducer::Mark* rm,
                           Comm::Mark* cm) {
  CaptureHooks h;
  h.save = [&reducer, &model_comm, rm, cm] {
    *rm = reducer.mark();
    *cm = model_comm.mark();
  };
  h.agree = [&host_comm](const std::string& mine) { return agree_first_failure(host_comm, mine); };
  h.restore = [&reducer, &model_comm, rm, cm] {
    reducer.rewind(*rm);
    model_comm.rewind(*cm);
  };
  return h;
}

TEST(Nccl, BootstrapAndCollectivesOnDeviceMemory) {
  SKIP_WITHOUT_GPU();
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
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  const float avg = static_cast<float>(world * (world - 1) / 2) / static_cast<float>(world);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += h[i] == avg ? 0 : 1;  // NaN counts as wrong
  EXPECT_EQ(wrong, 0u) << "elements of " << n << " differ from the average " << avg
                       << " (first: " << h[0] << ")";
  // Broadcast from the last rank.
  h[0] = static_cast<float>(rank * 10 + 1);
  CUDA_CHECK(cudaMemcpy(d, h.data(), sizeof(float), cudaMemcpyHostToDevice));
  comm->broadcast(std::span<float>(d, 1), world - 1);
  CUDA_CHECK(cudaMemcpy(h.data(), d, sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(h[0], static_cast<float>((world - 1) * 10 + 1));
  CUDA_CHECK(cudaFree(d));
  std::printf("NCCL bootstrap + collectives OK on %d rank(s)\n", world);
}

// The GPU Reducer: bucket all-reduces on the NCCL stream, started from backward's layer-ready
// callbacks and joined to the compute stream by events, average exactly like one all-reduce of
// the arena, eagerly and when the step is captured in a CUDA graph and replayed; so do the fp16
// and bf16 hooks encoded and summed on the device (the values are exact in 16 bits: quarters up
// to 24 plus the rank, a power-of-two world).
TEST(Nccl, BucketedOverlapOnItsOwnStreamAveragesLikeOneAllReduce) {
  SKIP_WITHOUT_GPU();
  std::string why;
  if (!gpus_for_every_rank(&why)) GTEST_SKIP() << why;
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if ((world & (world - 1)) != 0) GTEST_SKIP() << "needs a power-of-two world (exact averages)";
  use_cuda_device(choose_gpu(rank, world, cuda_device_count(), true));
  auto comm = make_nccl_comm();
  auto host = make_mpi_comm();
  auto ops = make_cuda_ops({.tf32 = false});
  comm->bind_stream(ops->stream());
  ConvNet model(*ops, 4);
  Reducer::Mark rm;
  Comm::Mark cm;
  const std::size_t n = model.grads().size();
  std::vector<float> mine(n), want(n), got(n);
  for (std::size_t i = 0; i < n; ++i) {
    mine[i] = static_cast<float>(i % 97) * 0.25f + static_cast<float>(rank);
    float sum = 0;
    for (int r = 0; r < world; ++r)
      sum += static_cast<float>(i % 97) * 0.25f + static_cast<float>(r);
    want[i] = sum / static_cast<float>(world);
  }
  for (const Compression c : {Compression::None, Compression::Fp16, Compression::Bf16}) {
    Reducer reducer(*comm, model, 25 * 1024, /*overlap=*/true, c);
    ASSERT_EQ(reducer.buckets().size(), 3u);
    const std::unique_ptr<StepGraphs> graphs =
        ops->make_step_graphs(reducer_hooks(reducer, *comm, *host, &rm, &cm),
                              /*inject_failure=*/false);
    for (const StepRun e : {StepRun::Eager, StepRun::Captured, StepRun::Replayed}) {
      ops->upload(mine.data(), model.grads().data(), n * sizeof(float));
      const StepRun ran = graphs->run(4, [&] {
        for (int layer = ConvNet::kLayers - 1; layer >= 0; --layer) reducer.layer_ready(layer);
        reducer.finish();
      });
      EXPECT_EQ(ran, e);
      reducer.count_step();  // every step, however it ran (a replay runs no host code)
      ops->download(model.grads().data(), got.data(), n * sizeof(float));
      EXPECT_EQ(got, want) << to_string(c) << ", step run as " << static_cast<int>(ran);
    }
    EXPECT_EQ(reducer.launch_order(), (std::vector<int>{0, 1, 2})) << to_string(c);
    const std::size_t elem = c == Compression::None ? sizeof(float) : 2;
    EXPECT_EQ(reducer.take_stats().payload_bytes, 3 * n * elem) << to_string(c);
  }
}

// A capture that fails (the --debug-fail-capture seam: a synchronisation inside the capture) does
// not abort: every rank agrees, the Reducer's and the communicator's bookkeeping are put back,
// the step runs eagerly with exactly the averages of one all-reduce, and that batch size stays
// eager (no second capture attempt).
TEST(Nccl, FailedCaptureFallsBackToEagerOnEveryRank) {
  SKIP_WITHOUT_GPU();
  std::string why;
  if (!gpus_for_every_rank(&why)) GTEST_SKIP() << why;
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if ((world & (world - 1)) != 0) GTEST_SKIP() << "needs a power-of-two world (exact averages)";
  use_cuda_device(choose_gpu(rank, world, cuda_device_count(), true));
  auto comm = make_nccl_comm();
  auto host = make_mpi_comm();
  auto ops = make_cuda_ops({.tf32 = false});
  comm->bind_stream(ops->stream());
  ConvNet model(*ops, 4);
  const std::size_t n = model.grads().size();
  std::vector<float> mine(n, static_cast<float>(rank)), got(n);
  const float want = static_cast<float>(world - 1) / 2.f;
  Reducer reducer(*comm, model, 25 * 1024, /*overlap=*/true);
  Reducer::Mark rm;
  Comm::Mark cm;
  const std::unique_ptr<StepGraphs> graphs =
      ops->make_step_graphs(reducer_hooks(reducer, *comm, *host, &rm, &cm),
                            /*inject_failure=*/true);
  const Comm::Mark before = comm->mark();
  for (const StepRun e : {StepRun::Eager, StepRun::FellBack, StepRun::Eager}) {
    ops->upload(mine.data(), model.grads().data(), n * sizeof(float));
    const StepRun ran = graphs->run(4, [&] {
      for (int layer = ConvNet::kLayers - 1; layer >= 0; --layer) reducer.layer_ready(layer);
      reducer.finish();
    });
    EXPECT_EQ(ran, e);
    reducer.count_step();  // StepEngine::run_step's: once per step, however it ran
    ops->download(model.grads().data(), got.data(), n * sizeof(float));
    std::size_t wrong = 0;
    for (float g : got) wrong += g == want ? 0 : 1;
    EXPECT_EQ(wrong, 0u) << "step run as " << static_cast<int>(ran);
  }
  EXPECT_EQ(graphs->captured(), 0);
  EXPECT_NE(graphs->last_failure().find("rank 0: CUDA error in cudaStreamSynchronize"),
            std::string::npos)
      << graphs->last_failure();
  // Three steps of three buckets were counted: the failed capture's did not count.
  EXPECT_EQ(comm->mark().payload_bytes - before.payload_bytes, 3 * n * sizeof(float));
  EXPECT_EQ(reducer.take_stats().steps, 3);
}

}  // namespace
}  // namespace mnist_ddp
