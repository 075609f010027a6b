// dnnl_ops_test.cpp — the oneDNN backend (channel-blocked layout, both block sizes) against the
// reference backend, op by op on the same logical data, and a whole training step of the model on
// both; and the block this CPU gets has a JIT convolution (not oneDNN's reference one).
#include <gtest/gtest.h>
#include <dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "../common/compare.hpp"
#include "mnist_ddp/base/half.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "ops/cpu/blocked_loops.hpp"
#include "ops/cpu/blocked_ops.hpp"
#include "ops/cpu/cpu_kernels.hpp"

#include "test_util.hpp"

namespace mnist_ddp {
namespace {

using testing::bit_patterns;
using testing::uniform_floats;

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
  const auto x = uniform_floats(c * n * hw, 1);
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
  // The fused 2x2 pooling needs even sides (an odd last row would get no input gradient).
  std::vector<float> g(8), big(8 * 5 * 4), out(big.size());
  std::vector<std::uint8_t> arg(big.size());
  EXPECT_DEATH(blocked::bn_relu_pool_forward(8, 8, 1, 5, 4, big.data(), g.data(), g.data(),
                                             g.data(), g.data(), out.data(), arg.data()),
               "even height and width");
  EXPECT_DEATH(blocked::bn_relu_pool_backward(8, 8, 1, 4, 5, big.data(), out.data(), out.data(),
                                              arg.data(), g.data(), g.data(), g.data(), true,
                                              out.data(), g.data(), g.data()),
               "even height and width");
}

class BlockedBn : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(BlockedBn, StatsFusedForwardAndBackwardMatchReference) {
  const auto [block, batch_stats] = GetParam();
  const int c = 32, n = 5, h = 6, w = 8, hw = h * w;
  auto x = uniform_floats(static_cast<std::size_t>(c) * n * hw, 1, -2, 2);
  for (int i = 0; i < 10; ++i) x[i] = 0.5f;  // exact ties, as on constant image background
  const auto gamma = uniform_floats(c, 2, -1.5f, 1.5f), beta = uniform_floats(c, 3),
             dy = uniform_floats(x.size() / 4, 4);
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

// Every channel's arithmetic is the same at both blocks (same operations, same order per lane),
// so the whole fused ops at block 8 equal those at block 16 bit for bit: 24 channels at block 8
// (both the two-blocks-a-pass sums and the one-block tail) against the first 24 of 32 at block 16.
TEST(BlockedBnBits, BlockEightEqualsBlockSixteenBitForBit) {
  const int c16 = 32, c8 = 24, n = 3, h = 28, w = 28, hw = h * w;
  const std::size_t per_c = static_cast<std::size_t>(n) * hw;
  auto x = uniform_floats(c16 * per_c, 11, -2, 2);
  for (int i = 0; i < 40; ++i) x[i] = 0.25f;  // exact ties
  const auto gamma = uniform_floats(c16, 12, -1.5f, 1.5f), beta = uniform_floats(c16, 13),
             dy = uniform_floats(x.size() / 4, 14);
  struct Out {
    std::vector<float> mean, invstd, rm, rv, y, dx, dg, db;
    std::vector<float> arg;
  };
  const auto run = [&](int block, int c, bool batch_stats) {
    const std::vector<float> xc(x.begin(), x.begin() + c * per_c);
    const std::vector<float> dyc(dy.begin(), dy.begin() + c * per_c / 4);
    Out o;
    o.mean.resize(c);
    o.invstd.resize(c);
    o.rm.assign(c, 0.2f);
    o.rv.assign(c, 1.1f);
    const auto xb = to_blocked(block, c, n, hw, xc);
    if (batch_stats) {
      blocked::batchnorm_stats(block, c, n, hw, xb.data(), 1e-5, 0.1, o.mean.data(),
                               o.invstd.data(), o.rm.data(), o.rv.data());
    } else {
      cpu::batchnorm_eval_stats(c, o.rm.data(), o.rv.data(), 1e-5, o.mean.data(), o.invstd.data());
    }
    std::vector<float> y(xc.size() / 4), dx(xc.size());
    std::vector<std::uint8_t> a(y.size());
    o.dg.resize(c);
    o.db.resize(c);
    blocked::bn_relu_pool_forward(block, c, n, h, w, xb.data(), gamma.data(), beta.data(),
                                  o.mean.data(), o.invstd.data(), y.data(), a.data());
    blocked::bn_relu_pool_backward(block, c, n, h, w, xb.data(), y.data(),
                                   to_blocked(block, c, n, hw / 4, dyc).data(), a.data(),
                                   gamma.data(), o.mean.data(), o.invstd.data(), batch_stats,
                                   dx.data(), o.dg.data(), o.db.data());
    o.y = to_ref(block, c, n, hw / 4, y);
    o.dx = to_ref(block, c, n, hw, dx);
    o.arg = to_ref(block, c, n, hw / 4, std::vector<float>(a.begin(), a.end()));
    return o;
  };
  for (const bool batch_stats : {true, false}) {
    SCOPED_TRACE(batch_stats ? "batch statistics" : "running statistics");
    const Out a = run(8, c8, batch_stats), b = run(16, c16, batch_stats);
    EXPECT_EQ(bit_patterns(a.mean), bit_patterns(b.mean, c8)) << "mean";
    EXPECT_EQ(bit_patterns(a.invstd), bit_patterns(b.invstd, c8)) << "invstd";
    EXPECT_EQ(bit_patterns(a.rm), bit_patterns(b.rm, c8)) << "rm";
    EXPECT_EQ(bit_patterns(a.rv), bit_patterns(b.rv, c8)) << "rv";
    EXPECT_EQ(bit_patterns(a.y), bit_patterns(b.y, c8 * per_c / 4)) << "y";
    EXPECT_EQ(bit_patterns(a.arg), bit_patterns(b.arg, c8 * per_c / 4)) << "arg";
    EXPECT_EQ(bit_patterns(a.dx), bit_patterns(b.dx, c8 * per_c)) << "dx";
    EXPECT_EQ(bit_patterns(a.dg), bit_patterns(b.dg, c8)) << "dg";
    EXPECT_EQ(bit_patterns(a.db), bit_patterns(b.db, c8)) << "db";
  }
}

// The AVX2+FMA loops against the generic ones on the same blocked data, all four, at both
// blocks: bit for bit (24 channels at block 8 take the two-blocks-a-pass sums and the one-block
// tail). The 0.1.0 checkpoint fixture's own step 6 was made by the generic loops at block 8.
class BlockedLoops : public ::testing::TestWithParam<int> {};

TEST_P(BlockedLoops, Avx2LoopsEqualGenericOnesBitForBit) {
  // if constexpr: a build without the AVX2 loops has no avx2_loops to call.
  if constexpr (!kAvx2Build) {
    GTEST_SKIP() << "this build has no AVX2+FMA loops";
  } else {
    const int block = GetParam(), c = block == 8 ? 24 : 32, n = 3, h = 28, w = 28, hw = h * w;
    const std::size_t size = static_cast<std::size_t>(c) * n * hw;
    auto x = uniform_floats(size, 21, -2, 2);
    // Ties in image 0's first block, every lane: windows (0, 0..3) hold a four-way tie, a tie of
    // the bottom pair above the top one, equal pair maxima, and b == d above a and c.
    const float ties[4][4] = {{0.25f, 0.25f, 0.25f, 0.25f},
                              {-1.f, -1.f, 0.5f, 0.5f},
                              {0.5f, 0.1f, 0.1f, 0.5f},
                              {0.1f, 0.7f, 0.2f, 0.7f}};
    for (int win = 0; win < 4; ++win) {
      for (int p = 0; p < 4; ++p) {
        const std::size_t px = (static_cast<std::size_t>(p / 2) * w + 2 * win + p % 2) * block;
        for (int l = 0; l < block; ++l) x[px + l] = ties[win][p];
      }
    }
    const auto scale = uniform_floats(c, 22, -1.5f, 1.5f), shift = uniform_floats(c, 23),
               dy = uniform_floats(size / 4, 24);
    const auto mean = uniform_floats(c, 25), kk = uniform_floats(c, 26), c0 = uniform_floats(c, 27),
               c1 = uniform_floats(c, 28);
    const blocked::PixelLoops& gen = blocked::generic_loops(block);
    const blocked::PixelLoops& simd = blocked::avx2_loops(block);
    std::vector<double> s_a(c), ss_a(c), s_b(c), ss_b(c);
    gen.stats_sums(c, n, hw, x.data(), s_a.data(), ss_a.data());
    simd.stats_sums(c, n, hw, x.data(), s_b.data(), ss_b.data());
    EXPECT_EQ(s_a, s_b);
    EXPECT_EQ(ss_a, ss_b);
    std::vector<float> y_a(size / 4), y_b(size / 4);
    std::vector<std::uint8_t> arg_a(size / 4), arg_b(size / 4);
    // The bf16 copies (--amp bf16) stored with each output: to_bf16 of it, on both loops.
    const auto bf16_of = [](const std::vector<float>& v) {
      std::vector<std::uint16_t> h(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) h[i] = to_bf16(v[i]);
      return h;
    };
    std::vector<std::uint16_t> y16_a(size / 4), y16_b(size / 4);
    gen.forward(c, n, h, w, x.data(), scale.data(), shift.data(), y_a.data(), arg_a.data(),
                y16_a.data());
    simd.forward(c, n, h, w, x.data(), scale.data(), shift.data(), y_b.data(), arg_b.data(),
                 y16_b.data());
    EXPECT_EQ(bit_patterns(y_a), bit_patterns(y_b));
    EXPECT_EQ(y16_a, bf16_of(y_a));
    EXPECT_EQ(y16_b, bf16_of(y_a));
    std::vector<float> y_c(size / 4);
    simd.forward(c, n, h, w, x.data(), scale.data(), shift.data(), y_c.data(), arg_b.data(),
                 nullptr);
    EXPECT_EQ(bit_patterns(y_c), bit_patterns(y_a));
    EXPECT_EQ(arg_a, arg_b);
    for (int k = 0; k < 4; ++k) {  // every argmax value occurs
      EXPECT_GT(std::count(arg_a.begin(), arg_a.end(), static_cast<std::uint8_t>(k)), 0) << k;
    }
    gen.grad_sums(c, n, h, w, x.data(), y_a.data(), dy.data(), arg_a.data(), mean.data(),
                  s_a.data(), ss_a.data());
    simd.grad_sums(c, n, h, w, x.data(), y_a.data(), dy.data(), arg_a.data(), mean.data(),
                   s_b.data(), ss_b.data());
    EXPECT_EQ(s_a, s_b);
    EXPECT_EQ(ss_a, ss_b);
    std::vector<float> dx_a(size), dx_b(size), dx_c(size);
    std::vector<std::uint16_t> dx16_a(size), dx16_b(size);
    gen.backward(c, n, h, w, x.data(), y_a.data(), dy.data(), arg_a.data(), mean.data(), kk.data(),
                 c0.data(), c1.data(), dx_a.data(), dx16_a.data());
    simd.backward(c, n, h, w, x.data(), y_a.data(), dy.data(), arg_a.data(), mean.data(), kk.data(),
                  c0.data(), c1.data(), dx_b.data(), dx16_b.data());
    simd.backward(c, n, h, w, x.data(), y_a.data(), dy.data(), arg_a.data(), mean.data(), kk.data(),
                  c0.data(), c1.data(), dx_c.data(), nullptr);
    EXPECT_EQ(bit_patterns(dx_a), bit_patterns(dx_b));
    EXPECT_EQ(bit_patterns(dx_c), bit_patterns(dx_a));
    EXPECT_EQ(dx16_a, bf16_of(dx_a));
    EXPECT_EQ(dx16_b, bf16_of(dx_a));
    // The copy alone (dx not stored): the same bits, from both loops.
    std::vector<std::uint16_t> only_a(size), only_b(size);
    gen.backward(c, n, h, w, x.data(), y_a.data(), dy.data(), arg_a.data(), mean.data(), kk.data(),
                 c0.data(), c1.data(), nullptr, only_a.data());
    simd.backward(c, n, h, w, x.data(), y_a.data(), dy.data(), arg_a.data(), mean.data(), kk.data(),
                  c0.data(), c1.data(), nullptr, only_b.data());
    EXPECT_EQ(only_a, dx16_a);
    EXPECT_EQ(only_b, dx16_a);
  }
}
INSTANTIATE_TEST_SUITE_P(Blocks, BlockedLoops, ::testing::Values(8, 16));

// At one compute thread and at two: on an AVX2 build at block 8 the backend runs layer2's filter
// gradient by our single-threaded kernel at one, by oneDNN's at two.
class DnnlConv : public ::testing::TestWithParam<std::tuple<int, int, ConvGeom>> {};

TEST_P(DnnlConv, MatchesReferenceForwardAndBackward) {
  const auto [block, threads, g] = GetParam();
  const testing::ComputeThreads scope(threads);
  auto ref = make_cpu_ops();
  auto dnnl = make_dnnl_ops(block);
  const int ihw = g.h * g.w, ohw = g.out_h() * g.out_w();
  const auto x = uniform_floats(static_cast<std::size_t>(g.c) * g.n * ihw, 1);
  const auto w = uniform_floats(static_cast<std::size_t>(g.k) * g.c * g.r * g.r, 2);
  const auto b = uniform_floats(g.k, 3);
  const auto dy = uniform_floats(static_cast<std::size_t>(g.k) * g.n * ohw, 4);
  // Inputs in each backend's layout (C = 1 is the same in both).
  const auto xb = g.c == 1 ? x : to_blocked(block, g.c, g.n, ihw, x);
  const auto dyb = to_blocked(block, g.k, g.n, ohw, dy);
  // Two float32 evaluations of the same sums (K terms each, in each backend's order): per element
  // |a - b| <= 2 gamma_{K+1} * sum |terms| (compare.hpp), the sums of |terms| from the reference
  // kernels in double on |x|, |w|, |dy|.
  using DV = std::vector<double>;
  const auto abs_d = [](const std::vector<float>& v) {
    DV a(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) a[i] = std::abs(double(v[i]));
    return a;
  };
  const DV xa = abs_d(x), wa = abs_d(w), ba = abs_d(b), dya = abs_d(dy);
  DV work(cpu::conv2d_workspace(g));
  const auto within = [](const char* what, const std::vector<float>& a, const std::vector<float>& b,
                         const DV& sums, double k) {
    const double gamma = testing::float32_gamma(k + 1);
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      worst = testing::worst_of(worst, std::abs(double(a[i]) - b[i]) / (2 * gamma * sums[i]));
    EXPECT_LE(worst, 1.0) << what << ": x" << worst << " of the bound";
  };
  std::vector<float> y1(dy.size()), y2(dy.size());
  ref->conv2d_forward(g, x.data(), w.data(), b.data(), y1.data());
  dnnl->conv2d_forward(g, xb.data(), w.data(), b.data(), y2.data());
  DV ysum(dy.size());
  cpu::conv2d_forward(g, xa.data(), wa.data(), ba.data(), ysum.data(), work.data());
  within("forward", to_ref(block, g.k, g.n, ohw, y2), y1, ysum, g.c * g.r * g.r + 1);
  std::vector<float> dw1(w.size()), dw2(w.size()), db1(g.k), db2(g.k);
  ref->conv2d_backward_filter(g, x.data(), dy.data(), dw1.data(), db1.data());
  dnnl->conv2d_backward_filter(g, xb.data(), dyb.data(), dw2.data(), db2.data());
  DV dwsum(w.size()), dbsum(g.k);
  cpu::conv2d_backward_filter(g, xa.data(), dya.data(), dwsum.data(), dbsum.data(), work.data());
  within("filter gradient", dw2, dw1, dwsum, g.n * ohw);
  within("bias gradient", db2, db1, dbsum, g.n * ohw);
  if (g.c != 1) {
    std::vector<float> dx1(x.size()), dx2(x.size());
    ref->conv2d_backward_data(g, w.data(), dy.data(), dx1.data());
    dnnl->conv2d_backward_data(g, w.data(), dyb.data(), dx2.data());
    DV dxsum(x.size());
    cpu::conv2d_backward_data(g, wa.data(), dya.data(), dxsum.data(), work.data());
    within("data gradient", to_ref(block, g.c, g.n, ihw, dx2), dx1, dxsum, g.k * g.r * g.r);
  }
  // conv2d_backward, the one call the model makes: both gradients, bitwise those of the two calls
  // above (dx only where asked for; layer1 passes nullptr), on each backend.
  for (Ops* ops : {ref.get(), dnnl.get()}) {
    const bool is_ref = ops == ref.get();
    const auto& xi = is_ref ? x : xb;
    const auto& dyi = is_ref ? dy : dyb;
    std::vector<float> dw(w.size()), db(g.k), dx(x.size(), -7.f), want_dx(x.size(), -7.f);
    ops->conv2d_backward(g, xi.data(), w.data(), dyi.data(), dw.data(), db.data(),
                         g.c != 1 ? dx.data() : nullptr);
    if (g.c != 1) ops->conv2d_backward_data(g, w.data(), dyi.data(), want_dx.data());
    EXPECT_EQ(dw, is_ref ? dw1 : dw2) << (is_ref ? "reference" : "onednn");
    EXPECT_EQ(db, is_ref ? db1 : db2) << (is_ref ? "reference" : "onednn");
    EXPECT_EQ(dx, want_dx) << (is_ref ? "reference" : "onednn");
  }
}
INSTANTIATE_TEST_SUITE_P(BlocksAndModelShapes, DnnlConv,
                         ::testing::Combine(::testing::Values(8, 16), ::testing::Values(1, 2),
                                            ::testing::Values(ConvGeom{7, 1, 28, 28, 16, 5, 2},
                                                              ConvGeom{7, 16, 14, 14, 32, 5, 2},
                                                              ConvGeom{3, 16, 6, 10, 32, 3, 1})));

class DnnlModel : public ::testing::TestWithParam<std::tuple<int, int>> {};  // block, threads

TEST_P(DnnlModel, TrainingStepMatchesReferenceBackend) {
  const auto [block, threads] = GetParam();
  const testing::ComputeThreads scope(threads);
  auto ref = make_cpu_ops();
  auto dnnl = make_dnnl_ops(block);
  const int n = 8;
  ConvNet a(*ref, n), b(*dnnl, n);
  a.init(21);
  b.init(21);
  const auto x = uniform_floats(static_cast<std::size_t>(n) * 784, 5, -1, 2);
  const std::vector<std::int32_t> y = {0, 1, 2, 3, 4, 5, 6, 7};
  // Two float32 evaluations of one step: twice the step's error model (test_util.hpp; doubled
  // again for the training-mode BN backward's cancellation, as in model_test.cpp). The summed loss
  // (n images) moves at most 2 x n x the largest logit's error.
  const double g_fwd = 2 * testing::float32_gamma(testing::step_float32_terms(n, true)),
               g_step = 4 * testing::float32_gamma(testing::step_float32_terms(n));
  std::vector<float> d1(n * 10), d2(n * 10);
  for (Mode mode : {Mode::Train, Mode::Frozen, Mode::Eval}) {
    const float* l1 = a.forward(x.data(), n, mode);
    const float* l2 = b.forward(x.data(), n, mode);
    double largest_logit = 0;
    for (int i = 0; i < n * 10; ++i)
      largest_logit = testing::worst_of(largest_logit, std::abs(l1[i]));
    const double loss1 = ref->softmax_cross_entropy(n, 10, l1, y.data(), d1.data(), 1.0 / n);
    const double loss2 = dnnl->softmax_cross_entropy(n, 10, l2, y.data(), d2.data(), 1.0 / n);
    EXPECT_NEAR(loss2, loss1, 2 * n * g_fwd * largest_logit);
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
      EXPECT_LT(err, g_step) << e.name;
    }
  }
  double largest_stat = 1;
  for (float v : a.buffers()) largest_stat = testing::worst_of(largest_stat, std::abs(double(v)));
  for (std::size_t i = 0; i < a.buffers().size(); ++i)
    EXPECT_NEAR(a.buffers()[i], b.buffers()[i], g_fwd * largest_stat);
}
INSTANTIATE_TEST_SUITE_P(BlocksAndThreads, DnnlModel,
                         ::testing::Combine(::testing::Values(8, 16), ::testing::Values(1, 2)));

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
