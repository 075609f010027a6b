// conv2_filter_grad_avx2_test.cpp — the filter and bias gradient of a convolution on nChw8c input
// (layer2's on the AVX2 path, AVX2 intrinsics): against the reference backend's im2col one computed
// in double, at layer2's geometry and at filter widths 1-7, paddings 0 to past the filter, images
// narrower than the filter's reach and an odd number of output lane groups; nothing written past
// dw and db; the refusals; and that the oneDNN backend runs it on one thread per rank only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "mnist_ddp/ops/ops.hpp"
#include "ops/cpu/blocked_ops.hpp"
#include "ops/cpu/conv2_filter_grad_avx2.hpp"
#include "ops/cpu/cpu_kernels.hpp"

#include "test_util.hpp"

namespace mnist_ddp {
namespace {

using testing::uniform_floats;

constexpr std::size_t kGuard = 64;  // elements past dw and db, which must stay -7

// Ours on x and dy given [C][N][H][W] and [K][N][OH][OW]: dw then db, each followed by its guard
// region.
struct Ours {
  std::vector<float> dw, db;
};
Ours ours(const ConvGeom& g, const std::vector<float>& x, const std::vector<float>& dy) {
  const int ihw = g.h * g.w, ohw = g.out_h() * g.out_w();
  std::vector<float> xb(x.size()), dyb(dy.size());
  blocked::from_cnhw(8, g.c, g.n, ihw, x.data(), xb.data());
  blocked::from_cnhw(8, g.k, g.n, ohw, dy.data(), dyb.data());
  Ours o{std::vector<float>(static_cast<std::size_t>(g.k) * g.c * g.r * g.r + kGuard, -7.f),
         std::vector<float>(g.k + kGuard, -7.f)};
  if constexpr (kAvx2Build) {
    blocked::channel_filter_grad(g, xb.data(), dyb.data(), o.dw.data(), o.db.data());
  }
  return o;
}

// Largest |ours - reference| / max(1, |reference|) over dw and db (a NaN counts as infinitely
// wrong), and whether the guards are intact.
struct Difference {
  double worst;
  bool guards_intact;
};
Difference against_reference(const ConvGeom& g) {
  const std::size_t in = static_cast<std::size_t>(g.c) * g.n * g.h * g.w;
  const std::size_t out = static_cast<std::size_t>(g.k) * g.n * g.out_h() * g.out_w();
  const std::size_t wn = static_cast<std::size_t>(g.k) * g.c * g.r * g.r;
  const auto x = uniform_floats(in, 1), dy = uniform_floats(out, 2);
  // The reference in double, activations [C][N][H][W].
  const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end());
  std::vector<double> dw_ref(wn), db_ref(g.k), work(cpu::conv2d_workspace(g));
  cpu::conv2d_backward_filter<double>(g, xd.data(), dyd.data(), dw_ref.data(), db_ref.data(),
                                      work.data());
  const Ours o = ours(g, x, dy);
  double worst = 0;
  const auto compare = [&](const std::vector<float>& got, const std::vector<double>& want) {
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double d = std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i]));
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
  };
  compare(o.dw, dw_ref);
  compare(o.db, db_ref);
  const auto intact = [](const std::vector<float>& v, std::size_t n) {
    return std::all_of(v.begin() + n, v.end(), [](float f) { return f == -7.f; });
  };
  return {worst, intact(o.dw, wn) && intact(o.db, g.k)};
}

class ChannelConv : public ::testing::TestWithParam<ConvGeom> {};

TEST_P(ChannelConv, MatchesTheReferenceInDouble) {
  if constexpr (!kAvx2Build) {
    GTEST_SKIP() << "this build has no AVX2+FMA kernels";
  } else {
    // Float sums over one image (<= 196 products here), float over <= 10 images: rounding of
    // order 1e-6. A wrong tap, lane, skipped border term or channel is off by a term's size.
    const Difference d = against_reference(GetParam());
    EXPECT_LT(d.worst, 1e-5);
    EXPECT_TRUE(d.guards_intact);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, ChannelConv,
    ::testing::Values(ConvGeom{3, 16, 14, 14, 32, 5, 2},  // layer2
                      ConvGeom{2, 8, 9, 7, 24, 3, 1},     // an odd number of lane groups
                      ConvGeom{2, 24, 6, 7, 24, 3, 1},    // ... and three input blocks
                      ConvGeom{2, 8, 6, 5, 8, 1, 0}, ConvGeom{2, 16, 8, 9, 16, 4, 0},
                      ConvGeom{2, 8, 7, 6, 16, 2, 1}, ConvGeom{2, 8, 9, 11, 8, 6, 2},
                      ConvGeom{2, 8, 10, 8, 16, 7, 3},
                      ConvGeom{10, 8, 7, 9, 16, 3, 1},   // past a chunk; odd interior
                      ConvGeom{2, 8, 2, 3, 16, 5, 2},    // narrower than the filter
                      ConvGeom{2, 8, 5, 4, 16, 3, 3}));  // pad > R

// The oneDNN backend at block 8 runs ours where the rank computes on one thread (the same bits
// as the kernel called directly), and oneDNN's multi-threaded kernel at two (other sums: other
// bits; still the reference's numbers within float rounding).
TEST(ChannelConv, TheBackendRunsItOnOneThread) {
  if constexpr (!kAvx2Build) {
    GTEST_SKIP() << "this build has no AVX2+FMA kernels";
  } else {
    const ConvGeom g{8, 16, 14, 14, 32, 5, 2};
    const auto x = uniform_floats(static_cast<std::size_t>(g.c) * g.n * g.h * g.w, 3);
    const auto dy = uniform_floats(static_cast<std::size_t>(g.k) * g.n * g.out_h() * g.out_w(), 4);
    const Ours direct = ours(g, x, dy);
    std::vector<float> xb(x.size()), dyb(dy.size());
    blocked::from_cnhw(8, g.c, g.n, g.h * g.w, x.data(), xb.data());
    blocked::from_cnhw(8, g.k, g.n, g.out_h() * g.out_w(), dy.data(), dyb.data());
    const std::size_t wn = static_cast<std::size_t>(g.k) * g.c * g.r * g.r;
    // One backend object for both: its primitives, cached at one thread, must serve two.
    std::unique_ptr<Ops> ops;
    const auto backend = [&](int threads) {
      const testing::ComputeThreads scope(threads);
      if (!ops) ops = make_dnnl_ops(8);
      std::vector<float> dw(wn), db(g.k);
      ops->conv2d_backward_filter(g, xb.data(), dyb.data(), dw.data(), db.data());
      return std::pair{dw, db};
    };
    const auto [dw1, db1] = backend(1);
    const auto [dw2, db2] = backend(2);
    EXPECT_TRUE(std::equal(dw1.begin(), dw1.end(), direct.dw.begin()));
    EXPECT_TRUE(std::equal(db1.begin(), db1.end(), direct.db.begin()));
    EXPECT_FALSE(std::equal(dw2.begin(), dw2.end(), direct.dw.begin()))
        << "at two threads oneDNN's kernel runs, whose sums are ordered otherwise";
    double worst = 0;
    for (std::size_t i = 0; i < wn; ++i)
      worst = std::max(worst,
                       std::abs(double(dw2[i]) - dw1[i]) / std::max(1.0, std::abs(double(dw1[i]))));
    // Two float sums of 1,568 products each, in other orders: rounding of order 1e-5 apart.
    EXPECT_LT(worst, 1e-4);
  }
}

TEST(ChannelConv, RefusesWhatItCannotCompute) {
  if constexpr (!kAvx2Build) {
    GTEST_SKIP() << "this build has no AVX2+FMA kernels";
  } else {
    std::vector<float> buf(65536);
    const auto call = [&](ConvGeom g) {
      blocked::channel_filter_grad(g, buf.data(), buf.data(), buf.data(), buf.data());
    };
    EXPECT_DEATH(call(ConvGeom{1, 12, 8, 8, 16, 3, 1}), "multiples of 8");
    EXPECT_DEATH(call(ConvGeom{1, 8, 8, 8, 20, 3, 1}), "multiples of 8");
    EXPECT_DEATH(call(ConvGeom{1, 8, 8, 8, 16, 9, 4}), "filter width 1..7");
    EXPECT_DEATH(call(ConvGeom{1, 8, 4, 4, 16, 7, 1}), "within the padded image");
    EXPECT_DEATH(call(ConvGeom{1, 8, 8, 8, 16, 3, -1}), "within the padded image");
  }
}

}  // namespace
}  // namespace mnist_ddp
