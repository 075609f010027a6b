// gpu_ddp_test.cpp — data parallelism on the GPU backend under mpirun: with the host-staged MPI
// comm (--comm mpi) several ranks share one GPU, and their averaged gradient equals the
// single-process gradient of the union batch (frozen BN). Skips with the reason without a GPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <span>
#include <vector>

#include "../common/compare.hpp"
#include "../common/gpu_probe.hpp"
#include "mnist_ddp/base/amp_mode.hpp"
#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/replicas.hpp"
#include "mnist_ddp/launch/device.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/model/tensor.hpp"
#include "mnist_ddp/ops/grad_scaler.hpp"
#include "mnist_ddp/ops/ops.hpp"

namespace mnist_ddp {
namespace {

TEST(GpuDdp, SharedGpuAveragedGradientEqualsUnionBatch) {
  SKIP_WITHOUT_GPU();
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  use_cuda_device(choose_gpu(rank, world, cuda_device_count(), false));
  auto ops = make_cuda_ops({.tf32 = false});
  auto host = make_mpi_comm();
  auto staged = make_host_staged_comm();
  constexpr int kLocal = 4;
  auto batch = [](int k, std::vector<float>& x, std::vector<std::int32_t>& y, std::size_t at) {
    SplitMix64 g(2000 + static_cast<std::uint64_t>(k));
    for (int i = 0; i < kLocal * 784; ++i) x[at * 784 + i] = g.uniform(-1, 2);
    for (int i = 0; i < kLocal; ++i) y[at + i] = static_cast<std::int32_t>(g.below(10));
  };
  auto run = [&](ConvNet& m, int n, const std::vector<float>& x,
                 const std::vector<std::int32_t>& y) {
    Tensor gx({n, 784}, Device::Cuda), gdl({n, 10}, Device::Cuda);
    auto* gy = reinterpret_cast<std::int32_t*>(ops->alloc_bytes(n * sizeof(std::int32_t)));
    ops->upload(x.data(), gx.data(), x.size() * sizeof(float));
    ops->upload(y.data(), gy, y.size() * sizeof(std::int32_t));
    ops->softmax_cross_entropy(n, 10, m.forward(gx.data(), n, Mode::Frozen), gy, gdl.data(),
                               1.0 / n);
    m.backward(gdl.data(), nullptr);
    ops->free_bytes(reinterpret_cast<std::uint8_t*>(gy));
  };
  ConvNet dist(*ops, kLocal);
  dist.init(5);
  broadcast_model(*staged, dist, *host);
  std::vector<float> x(kLocal * 784);
  std::vector<std::int32_t> y(kLocal);
  batch(rank, x, y, 0);
  run(dist, kLocal, x, y);
  average_gradients(*staged, dist);
  ConvNet single(*ops, kLocal * world);
  single.init(5);
  std::vector<float> ux(static_cast<std::size_t>(kLocal) * world * 784);
  std::vector<std::int32_t> uy(static_cast<std::size_t>(kLocal) * world);
  for (int k = 0; k < world; ++k) batch(k, ux, uy, static_cast<std::size_t>(k) * kLocal);
  run(single, kLocal * world, ux, uy);
  std::vector<float> gd(dist.grads().size()), gs(gd.size());
  ops->download(dist.grads().data(), gd.data(), gd.size() * sizeof(float));
  ops->download(single.grads().data(), gs.data(), gs.size() * sizeof(float));
  double worst = 0;
  for (std::size_t i = 0; i < gd.size(); ++i) {
    worst = testing::worst_of(worst, std::abs(double(gd[i]) - gs[i]));
    ASSERT_NEAR(gd[i], gs[i], 1e-5 + 1e-3 * std::abs(gs[i])) << "gradient " << i;
  }
  if (rank == 0)
    std::printf("GPU --comm mpi: max |avg grad - union grad| = %.3g over %d ranks\n", worst, world);
}

// --amp fp16: an inf on one rank only (as under a hook whose sum does not carry it) still makes
// every rank skip the step and back the scale off, so the replicas stay identical.
TEST(GpuDdp, AmpSkipIsAgreedAcrossRanks) {
  SKIP_WITHOUT_GPU();
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
  use_cuda_device(choose_gpu(rank, world, cuda_device_count(), false));
  auto ops = make_cuda_ops({.tf32 = false});
  auto staged = make_host_staged_comm();
  auto scaler = ops->make_grad_scaler(LossScaleRule{});
  ops->set_amp(AmpMode::Fp16, scaler->scale(), scaler->found_inf());
  constexpr std::size_t kN = 256;
  Tensor params({static_cast<int>(kN)}, Device::Cuda), grads({static_cast<int>(kN)}, Device::Cuda),
      momentum({static_cast<int>(kN)}, Device::Cuda);
  std::vector<float> p(kN, 1.f), g(kN, 65536.f * 0.25f), after(kN);
  ops->upload(p.data(), params.data(), kN * sizeof(float));
  SgdParams s;
  s.momentum = 0.9;
  for (const bool overflow : {true, false}) {
    std::vector<float> mine = g;
    if (overflow && rank == world - 1) mine[7] = INFINITY;
    ops->upload(mine.data(), grads.data(), kN * sizeof(float));
    ops->set_step_scalars({0, 0.5, !overflow});
    unscale_and_agree(*scaler, *staged, std::span<float>(grads.data(), kN));
    float found = -1;
    ops->download(scaler->found_inf(), &found, sizeof found);
    EXPECT_EQ(found, overflow ? 1.f : 0.f) << "rank " << rank;
    ops->sgd_step(kN, params.data(), grads.data(), momentum.data(), s);
    scaler->update();
    ops->download(params.data(), after.data(), kN * sizeof(float));
    if (overflow) {
      EXPECT_EQ(after, p) << "rank " << rank << " stepped although a peer overflowed";
      EXPECT_EQ(scaler->state().scale, 32768.f) << "rank " << rank;
    } else {
      // 1 - 0.5 * (65536/4) / 32768: the clean step used the backed-off scale.
      EXPECT_EQ(after[0], 0.75f) << "rank " << rank;
      EXPECT_EQ(scaler->state().growth_tracker, 1) << "rank " << rank;
    }
  }
  ops->set_amp(AmpMode::Off, nullptr, nullptr);
}

}  // namespace
}  // namespace mnist_ddp
