// dnnl_ops_test.cpp — the oneDNN backend (channel-blocked layout, both block sizes) against the
// reference backend, op by op on the same logical data, and a whole training step of the model on
// both; and the block this CPU gets has a JIT convolution (not oneDNN's reference one).
#include <gtest/gtest.h>
#include <dnnl.hpp>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "../common/compare.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/model/rng.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "ops/cpu/blocked_ops.hpp"
#include "ops/cpu/cpu_kernels.hpp"

namespace mnist_ddp {
namespace {

std::vector<float> rnd(std::size_t n, std::uint64_t seed, float lo = -1, float hi = 1) {
  SplitMix64 r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = r.uniform(lo, hi);
  return v;
}

// Max |a-b| / max(1, |b|) over the elements.
double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = testing::worst_of(m, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  return m;
}

std::vector<float> to_blocked(int block, int c, int n, int hw, const std::vector<float>& cnhw) {
  std::vector<float> out(cnhw.size());
  blocked::from_cnhw(block, c, n, hw, cnhw.data(), out.data());
  return out;
}
std::vector<float> to_ref(int block, int c, int n, int hw, const std::vector<float>& blk) {
  std::vector<float> out(blk.size());
  blocked::to_cnhw(block, c, n, hw, blk.data(), out.data());
  return out;
}

class Blocked : public ::testing::TestWithParam<int> {};

TEST_P(Blocked, LayoutConversionsRoundTrip) {
  const int block = GetParam(), c = 32, n = 3, hw = 5;
  const auto x = rnd(c * n * hw, 1);
  const auto b = to_blocked(block, c, n, hw, x);
  EXPECT_EQ(to_ref(block, c, n, hw, b), x);
  // Channel `block` of image 0, pixel 0 opens the second block: element hw * block.
  EXPECT_EQ(b[static_cast<std::size_t>(hw) * block], x[static_cast<std::size_t>(block) * n * hw]);
  std::vector<float> rows(x.size()), back(x.size()), ref_rows(x.size());
  blocked::to_rows(block, c, n, hw, b.data(), rows.data());
  cpu::cnhw_to_nchw(c, n, hw, x.data(), ref_rows.data());
  EXPECT_EQ(rows, ref_rows);
  blocked::from_rows(block, c, n, hw, rows.data(), back.data());
  EXPECT_EQ(back, b);
}
INSTANTIATE_TEST_SUITE_P(Blocks, Blocked, ::testing::Values(8, 16));

TEST(Blocked, OtherBlocksAndUnevenChannelsAreRefused) {
  std::vector<float> x(24 * 2), y(x.size());
  EXPECT_DEATH(blocked::to_rows(4, 24, 1, 2, x.data(), y.data()), "channel block must be 8 or 16");
  EXPECT_DEATH(blocked::to_rows(16, 24, 1, 2, x.data(), y.data()), "not a multiple");
}

class BlockedBn : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(BlockedBn, StatsFusedForwardAndBackwardMatchReference) {
  const auto [block, batch_stats] = GetParam();
  const int c = 32, n = 5, h = 6, w = 8, hw = h * w;
  auto x = rnd(static_cast<std::size_t>(c) * n * hw, 1, -2, 2);
  for (int i = 0; i < 10; ++i) x[i] = 0.5f;  // exact ties, as on constant image background
  const auto gamma = rnd(c, 2, -1.5f, 1.5f), beta = rnd(c, 3), dy = rnd(x.size() / 4, 4);
  std::vector<float> m1(c), i1(c), rm1(c, 0.2f), rv1(c, 1.1f), m2(c), i2(c), rm2 = rm1, rv2 = rv1;
  if (batch_stats) {
    cpu::batchnorm_stats(c, static_cast<std::size_t>(n) * hw, x.data(), 1e-5, 0.1, m1.data(),
                         i1.data(), rm1.data(), rv1.data());
    const auto xb = to_blocked(block, c, n, hw, x);
    blocked::batchnorm_stats(block, c, n, hw, xb.data(), 1e-5, 0.1, m2.data(), i2.data(),
                             rm2.data(), rv2.data());
    EXPECT_LT(max_rel(m2, m1), 1e-6);
    EXPECT_LT(max_rel(i2, i1), 1e-5);
    EXPECT_LT(max_rel(rm2, rm1), 1e-6);
    EXPECT_LT(max_rel(rv2, rv1), 1e-5);
  } else {
    cpu::batchnorm_eval_stats(c, rm1.data(), rv1.data(), 1e-5, m1.data(), i1.data());
  }
  // Same statistics into both fused ops, so outputs can be compared tightly.
  std::vector<float> y1(x.size() / 4), y2(x.size() / 4);
  std::vector<std::uint8_t> a1(y1.size()), a2(y1.size());
  cpu::bn_relu_pool_forward(c, n, h, w, x.data(), gamma.data(), beta.data(), m1.data(), i1.data(),
                            y1.data(), a1.data());
  const auto xb = to_blocked(block, c, n, hw, x);
  blocked::bn_relu_pool_forward(block, c, n, h, w, xb.data(), gamma.data(), beta.data(), m1.data(),
                                i1.data(), y2.data(), a2.data());
  EXPECT_LT(max_rel(to_ref(block, c, n, hw / 4, y2), y1), 1e-6);
  std::vector<float> a1f(a1.begin(), a1.end()), a2f(a2.begin(), a2.end());
  EXPECT_EQ(to_ref(block, c, n, hw / 4, a2f), a1f);  // same argmax, ties included
  std::vector<float> dx1(x.size()), dx2(x.size()), dg1(c), dg2(c), db1(c), db2(c);
  cpu::bn_relu_pool_backward(c, n, h, w, x.data(), y1.data(), dy.data(), a1.data(), gamma.data(),
                             m1.data(), i1.data(), batch_stats, dx1.data(), dg1.data(), db1.data());
  const auto dyb = to_blocked(block, c, n, hw / 4, dy);
  blocked::bn_relu_pool_backward(block, c, n, h, w, xb.data(), y2.data(), dyb.data(), a2.data(),
                                 gamma.data(), m1.data(), i1.data(), batch_stats, dx2.data(),
                                 dg2.data(), db2.data());
  EXPECT_LT(max_rel(to_ref(block, c, n, hw, dx2), dx1), 1e-5);
  EXPECT_LT(max_rel(dg2, dg1), 1e-5);
  EXPECT_LT(max_rel(db2, db1), 1e-5);
}
INSTANTIATE_TEST_SUITE_P(BlocksTrainAndFrozen, BlockedBn,
                         ::testing::Combine(::testing::Values(8, 16), ::testing::Bool()));

class DnnlConv : public ::testing::TestWithParam<std::tuple<int, ConvGeom>> {};

TEST_P(DnnlConv, MatchesReferenceForwardAndBackward) {
  const auto [block, g] = GetParam();
  auto ref = make_cpu_ops();
  auto dnnl = make_dnnl_ops(block);
  const int ihw = g.h * g.w, ohw = g.out_h() * g.out_w();
  const auto x = rnd(static_cast<std::size_t>(g.c) * g.n * ihw, 1);
  const auto w = rnd(static_cast<std::size_t>(g.k) * g.c * g.r * g.r, 2);
  const auto b = rnd(g.k, 3);
  const auto dy = rnd(static_cast<std::size_t>(g.k) * g.n * ohw, 4);
  // Inputs in each backend's layout (C = 1 is the same in both).
  const auto xb = g.c == 1 ? x : to_blocked(block, g.c, g.n, ihw, x);
  const auto dyb = to_blocked(block, g.k, g.n, ohw, dy);
  std::vector<float> y1(dy.size()), y2(dy.size());
  ref->conv2d_forward(g, x.data(), w.data(), b.data(), y1.data());
  dnnl->conv2d_forward(g, xb.data(), w.data(), b.data(), y2.data());
  EXPECT_LT(max_rel(to_ref(block, g.k, g.n, ohw, y2), y1), 1e-4);  // float sums of K=400 terms
  std::vector<float> dw1(w.size()), dw2(w.size()), db1(g.k), db2(g.k);
  ref->conv2d_backward_filter(g, x.data(), dy.data(), dw1.data(), db1.data());
  dnnl->conv2d_backward_filter(g, xb.data(), dyb.data(), dw2.data(), db2.data());
  EXPECT_LT(max_rel(dw2, dw1), 1e-4);
  EXPECT_LT(max_rel(db2, db1), 1e-4);
  if (g.c != 1) {
    std::vector<float> dx1(x.size()), dx2(x.size());
    ref->conv2d_backward_data(g, w.data(), dy.data(), dx1.data());
    dnnl->conv2d_backward_data(g, w.data(), dyb.data(), dx2.data());
    EXPECT_LT(max_rel(to_ref(block, g.c, g.n, ihw, dx2), dx1), 1e-4);
  }
}
INSTANTIATE_TEST_SUITE_P(BlocksAndModelShapes, DnnlConv,
                         ::testing::Combine(::testing::Values(8, 16),
                                            ::testing::Values(ConvGeom{7, 1, 28, 28, 16, 5, 2},
                                                              ConvGeom{7, 16, 14, 14, 32, 5, 2},
                                                              ConvGeom{3, 16, 6, 10, 32, 3, 1})));

class DnnlModel : public ::testing::TestWithParam<int> {};

TEST_P(DnnlModel, TrainingStepMatchesReferenceBackend) {
  auto ref = make_cpu_ops();
  auto dnnl = make_dnnl_ops(GetParam());
  const int n = 8;
  ConvNet a(*ref, n), b(*dnnl, n);
  a.init(21);
  b.init(21);
  const auto x = rnd(static_cast<std::size_t>(n) * 784, 5, -1, 2);
  const std::vector<std::int32_t> y = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<float> d1(n * 10), d2(n * 10);
  for (Mode mode : {Mode::Train, Mode::Frozen, Mode::Eval}) {
    const float* l1 = a.forward(x.data(), n, mode);
    const float* l2 = b.forward(x.data(), n, mode);
    const double loss1 = ref->softmax_cross_entropy(n, 10, l1, y.data(), d1.data(), 1.0 / n);
    const double loss2 = dnnl->softmax_cross_entropy(n, 10, l2, y.data(), d2.data(), 1.0 / n);
    EXPECT_NEAR(loss2, loss1, 1e-4 * n);
    if (mode == Mode::Eval) continue;
    a.backward(d1.data(), nullptr);
    b.backward(d2.data(), nullptr);
    for (const auto& e : a.param_entries()) {
      double scale = 1e-3, err = 0;
      for (std::size_t i = 0; i < e.numel; ++i)
        scale = testing::worst_of(scale, std::abs(double(a.grads()[e.offset + i])));
      for (std::size_t i = 0; i < e.numel; ++i)
        err = testing::worst_of(
            err, std::abs(double(a.grads()[e.offset + i]) - b.grads()[e.offset + i]) / scale);
      EXPECT_LT(err, 1e-3) << e.name;
    }
  }
  for (std::size_t i = 0; i < a.buffers().size(); ++i)
    EXPECT_NEAR(a.buffers()[i], b.buffers()[i], 1e-5);
}
INSTANTIATE_TEST_SUITE_P(Blocks, DnnlModel, ::testing::Values(8, 16));

// The default backend's block is one oneDNN has JIT kernels for, for every convolution of the
// model, on this CPU. On a CPU without AVX-512 the 16-block layout (and, with the 8-block one, the
// image's backward-weights on NCHW input) ran oneDNN's reference convolution, ~100x slower: 102
// images/s on an AVX2-only EPYC until the block and that input layout followed the CPU.
TEST(DnnlLayout, TheBlockThisCpuGetsHasJitKernelsForEveryConvolution) {
  const DnnlLayout layout = dnnl_layout();
  // The ISA oneDNN dispatches to (the CPU's, or less under ONEDNN_MAX_CPU_ISA): a bit mask that
  // contains each ISA it implies.
  const auto has = [isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa())](dnnl::cpu_isa i) {
    return (isa & static_cast<unsigned>(i)) == static_cast<unsigned>(i);
  };
  if (!has(dnnl::cpu_isa::avx2)) GTEST_SKIP() << "oneDNN dispatches to less than AVX2 here";
  EXPECT_EQ(layout.convolution.find("ref"), std::string::npos) << layout.convolution;
  EXPECT_EQ(layout.block, has(dnnl::cpu_isa::avx512_core) ? 16 : 8) << layout.convolution;
}

}  // namespace
}  // namespace mnist_ddp
