// sync_bn_test.cpp — SyncBatchNorm under mpirun: ranks holding unequal slices of one batch, with
// --sync-bn's exchanges, must give what one process computes on the union batch: the same
// logits for their samples, the same running statistics, and (gradients summed over ranks, each
// rank's loss scaled by 1/union size) the same gradients. Both CPU backends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "../common/compare.hpp"
#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/replicas.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"

namespace mnist_ddp {
namespace {

struct Pass {
  std::vector<float> logits, grads, buffers;
};

// One training step's forward and backward on x[n] (no optimizer), optionally with SyncBN.
Pass run(Ops& ops, const float* x, const std::int32_t* y, int n, double grad_scale,
         const BnSync* sync) {
  ConvNet model(ops, n);
  model.init(5);
  ops.set_bn_sync(sync);
  const float* logits = model.forward(x, n, Mode::Train);
  std::vector<float> dlogits(static_cast<std::size_t>(n) * 10);
  ops.softmax_cross_entropy(n, 10, logits, y, dlogits.data(), grad_scale);
  Pass p;
  p.logits.assign(logits, logits + static_cast<std::size_t>(n) * 10);
  model.backward(dlogits.data(), nullptr);
  ops.set_bn_sync(nullptr);
  p.grads.assign(model.grads().begin(), model.grads().end());
  p.buffers.assign(model.buffers().begin(), model.buffers().end());
  return p;
}

double max_diff(const float* a, const float* b, std::size_t n) {
  double m = 0;
  for (std::size_t i = 0; i < n; ++i) m = testing::worst_of(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

class SyncBnTest : public ::testing::TestWithParam<CpuKernels> {
 protected:
  std::unique_ptr<Comm> comm_ = make_mpi_comm();
};

TEST_P(SyncBnTest, RanksEqualOneProcessOnTheUnionBatch) {
  Comm& comm = *comm_;
  const int ranks = comm.size(), me = comm.rank();
  // Unequal slices: rank r holds 2 + r images.
  std::vector<int> first(static_cast<std::size_t>(ranks) + 1, 0);
  for (int r = 0; r < ranks; ++r) first[r + 1] = first[r] + 2 + r;
  const int total = first[ranks], mine = 2 + me;
  SplitMix64 g(11);
  std::vector<float> x(static_cast<std::size_t>(total) * 784);
  for (float& v : x) v = g.uniform(-1.f, 2.f);
  std::vector<std::int32_t> y(static_cast<std::size_t>(total));
  for (auto& l : y) l = static_cast<std::int32_t>(g.below(10));

  auto ops = make_cpu_backend({.cpu_kernels = GetParam()});
  const Pass whole = run(*ops, x.data(), y.data(), total, 1.0 / total, nullptr);
  const BnSync sync = make_sync_bn(comm);
  Pass part = run(*ops, x.data() + static_cast<std::size_t>(first[me]) * 784, y.data() + first[me],
                  mine, 1.0 / total, &sync);
  comm.allreduce(std::span<float>(part.grads), ReduceOp::Sum);

  const double dl =
      max_diff(part.logits.data(), whole.logits.data() + first[me] * 10, part.logits.size());
  const double dg = max_diff(part.grads.data(), whole.grads.data(), part.grads.size());
  const double db = max_diff(part.buffers.data(), whole.buffers.data(), part.buffers.size());
  // Both are float32 evaluations of the same step, in other summation orders (a slice's sums
  // plus an all-reduce, against one sum over the union): each within gamma_K of the exact one
  // (compare.hpp), relative to the magnitudes summed, with K = the longest float32 sum of the step
  // (layer1's filter gradient over the union's total x 28 x 28 pixels). The magnitude is each
  // tensor's largest element (logits, gradients) or 1 (running statistics, from 0 / 1): 2 gamma_K
  // x that bounds their difference whatever order each kernel family adds in.
  const double gamma2 = 2 * testing::float32_gamma(static_cast<double>(total) * 784);
  const auto largest = [](const std::vector<float>& v) {
    double m = 0;
    for (float e : v) m = testing::worst_of(m, std::fabs(double(e)));
    return m;
  };
  const double bl = gamma2 * largest(whole.logits), bg = gamma2 * largest(whole.grads), bb = gamma2;
  EXPECT_LT(dl, bl) << "logits";
  EXPECT_LT(dg, bg) << "gradients";
  EXPECT_LT(db, bb) << "running statistics";
  // The running statistics moved from their initial 0 / 1 (so equality above is not vacuous).
  const auto moved = std::count_if(whole.buffers.begin(), whole.buffers.end(),
                                   [](float v) { return v != 0.f && v != 1.f; });
  EXPECT_GT(moved, 40);
  if (me == 0)
    std::printf(
        "   %d ranks, slices 2..%d: max |diff| logits %.2e (bound %.2e), grads %.2e (%.2e), "
        "running stats %.2e (%.2e)\n",
        ranks, 1 + ranks, dl, bl, dg, bg, db, bb);
  // Without the exchanges each rank normalises by its own slice: outside the bound (the check
  // above has teeth).
  if (ranks > 1) {
    Pass local = run(*ops, x.data() + static_cast<std::size_t>(first[me]) * 784,
                     y.data() + first[me], mine, 1.0 / total, nullptr);
    EXPECT_GT(
        max_diff(local.logits.data(), whole.logits.data() + first[me] * 10, local.logits.size()),
        10 * bl);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, SyncBnTest,
                         ::testing::Values(CpuKernels::OneDnn, CpuKernels::Reference));

}  // namespace
}  // namespace mnist_ddp
