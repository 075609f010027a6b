// image_filter_grad_test.cpp — layer1's own filter/bias gradient (AVX2 intrinsics on the blocked
// output gradient) against the reference backend's im2col one computed in double, at both channel
// blocks and several filter widths, paddings and odd image sizes; and that the oneDNN backend
// uses it exactly where oneDNN would copy the output gradient into another layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "mnist_ddp/model/rng.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "ops/cpu/blocked_ops.hpp"
#include "ops/cpu/cpu_kernels.hpp"
#include "ops/cpu/image_filter_grad.hpp"

namespace mnist_ddp {
namespace {

std::vector<float> rnd(std::size_t n, std::uint64_t seed) {
  SplitMix64 r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = r.uniform(-1, 1);
  return v;
}

// The largest relative difference from the reference (in double) over dw and db, at `block`.
double worst_difference(int block, const cpu::ConvGeom& g) {
  const std::size_t in = static_cast<std::size_t>(g.n) * g.h * g.w;
  const std::size_t out = static_cast<std::size_t>(g.k) * g.n * g.out_h() * g.out_w();
  const auto x = rnd(in, 1), dy = rnd(out, 2);  // dy: [K][N][OH][OW], the reference's layout
  const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end());
  const std::size_t wn = static_cast<std::size_t>(g.k) * g.r * g.r;
  std::vector<double> dw_ref(wn), db_ref(g.k), work(cpu::conv2d_workspace(g));
  cpu::conv2d_backward_filter<double>(g, xd.data(), dyd.data(), dw_ref.data(), db_ref.data(),
                                      work.data());
  std::vector<float> dyb(out), dw(wn, -7.f), db(g.k, -7.f);
  blocked::from_cnhw(block, g.k, g.n, g.out_h() * g.out_w(), dy.data(), dyb.data());
  if constexpr (kAvx2Build) {
    blocked::image_filter_grad(block, g, x.data(), dyb.data(), dw.data(), db.data());
  }
  double worst = 0;
  const auto count = [&worst](float got, double want) {  // a NaN counts as infinitely wrong
    const double d = std::abs(got - want) / std::max(1.0, std::abs(want));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  };
  for (std::size_t i = 0; i < wn; ++i) count(dw[i], dw_ref[i]);
  for (int k = 0; k < g.k; ++k) count(db[k], db_ref[k]);
  return worst;
}

class ImageFilterGrad : public ::testing::TestWithParam<std::tuple<int, cpu::ConvGeom>> {};

TEST_P(ImageFilterGrad, MatchesTheReferenceInDouble) {
  if constexpr (!kAvx2Build) {
    GTEST_SKIP() << "this build has no AVX2+FMA kernels";
  } else {
    const auto [block, g] = GetParam();
    // Float sums over one image (<= 784 products), double over images: rounding of order 1e-5
    // (9.5e-6 seen at 28x28); a wrong tap, lane or border is off by the size of a term.
    EXPECT_LT(worst_difference(block, g), 3e-5);
  }
}

// 24 channels at block 8: three lane groups, the last one alone.
TEST(ImageFilterGrad, AnOddNumberOfLaneGroups) {
  if constexpr (!kAvx2Build) {
    GTEST_SKIP() << "this build has no AVX2+FMA kernels";
  } else {
    EXPECT_LT(worst_difference(8, cpu::ConvGeom{2, 1, 12, 10, 24, 5, 2}), 3e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(
    BlocksAndGeometries, ImageFilterGrad,
    ::testing::Combine(::testing::Values(8, 16),
                       ::testing::Values(cpu::ConvGeom{3, 1, 28, 28, 16, 5, 2},  // layer1
                                         cpu::ConvGeom{2, 1, 9, 7, 32, 3, 1},
                                         cpu::ConvGeom{2, 1, 6, 5, 16, 1, 0},
                                         cpu::ConvGeom{2, 1, 8, 9, 16, 4, 0},
                                         cpu::ConvGeom{2, 1, 7, 6, 16, 2, 1},
                                         cpu::ConvGeom{1, 1, 9, 11, 16, 6, 2},
                                         cpu::ConvGeom{1, 1, 10, 8, 16, 7, 3})));

TEST(ImageFilterGrad, RefusesWhatItCannotCompute) {
  if constexpr (!kAvx2Build) {
    GTEST_SKIP() << "this build has no AVX2+FMA kernels";
  } else {
    std::vector<float> buf(4096);
    const auto call = [&](int block, cpu::ConvGeom g) {
      blocked::image_filter_grad(block, g, buf.data(), buf.data(), buf.data(), buf.data());
    };
    EXPECT_DEATH(call(8, cpu::ConvGeom{1, 2, 8, 8, 16, 3, 1}), "1 input channel");
    EXPECT_DEATH(call(16, cpu::ConvGeom{1, 1, 8, 8, 24, 3, 1}), "1 input channel");
    EXPECT_DEATH(call(8, cpu::ConvGeom{1, 1, 8, 8, 16, 9, 4}), "filter width 1..7");
    EXPECT_DEATH(call(8, cpu::ConvGeom{1, 1, 4, 4, 16, 7, 1}), "within the padded image");
    EXPECT_DEATH(call(8, cpu::ConvGeom{1, 1, 8, 8, 16, 3, -1}), "within the padded image");
    EXPECT_DEATH(call(4, cpu::ConvGeom{1, 1, 8, 8, 16, 3, 1}), "8 or 16");
  }
}

// The backend's choice: ours exactly where oneDNN's filter gradient for the image would need the
// output gradient copied out of the blocked layout (its start-up line then names ours).
TEST(ImageFilterGrad, TheBackendNamesItWhereItRuns) {
  const DnnlLayout l = dnnl_layout();
  if (!kAvx2Build) {
    EXPECT_EQ(l.own, "");
  } else if (l.block == 16) {
    EXPECT_EQ(l.own, "") << "oneDNN has an AVX-512 kernel on nChw16c: " << l.convolution;
  } else {
    EXPECT_EQ(l.own, "layer1 filter gradient: mnist_ddp avx2") << l.convolution;
  }
}

}  // namespace
}  // namespace mnist_ddp
