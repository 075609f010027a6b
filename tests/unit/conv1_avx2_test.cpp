// conv1_avx2_test.cpp — layer1's own convolution kernels (AVX2 intrinsics on the blocked output
// and output gradient): forward and filter/bias gradient against the reference backend's im2col
// ones computed in double, at both channel blocks, filter widths 1-7, several paddings, odd image
// sizes and an odd number of lane groups; the refusals; and where the oneDNN backend runs them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "mnist_ddp/ops/ops.hpp"
#include "ops/cpu/blocked_ops.hpp"
#include "ops/cpu/conv1_avx2.hpp"
#include "ops/cpu/cpu_kernels.hpp"

#include "test_util.hpp"

namespace mnist_ddp {
namespace {

using testing::uniform_floats;

// Largest |got - want| / max(1, |want|) over the elements; a NaN counts as infinitely wrong.
template <class Got, class Want>
double worst_of(const Got& got, const Want& want) {
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(got[i] - want[i]) / std::max(1.0, std::abs(double(want[i])));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

// Ours against the reference in double, at `block`: the filter gradient (dw and db together) and
// the forward output.
struct Differences {
  double grad, forward;
  bool guards_intact;  // nothing written past the end of dw, db or y
};
Differences worst_difference(int block, const ConvGeom& g) {
  const std::size_t in = static_cast<std::size_t>(g.n) * g.h * g.w;
  const std::size_t out = static_cast<std::size_t>(g.k) * g.n * g.out_h() * g.out_w();
  const std::size_t wn = static_cast<std::size_t>(g.k) * g.r * g.r;
  const int ohw = g.out_h() * g.out_w();
  const auto x = uniform_floats(in, 1), dy = uniform_floats(out, 2), w = uniform_floats(wn, 3),
             b = uniform_floats(g.k, 4);
  // The reference in double, output (gradient) [K][N][OH][OW].
  const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end());
  const std::vector<double> wd(w.begin(), w.end()), bd(b.begin(), b.end());
  std::vector<double> dw_ref(wn), db_ref(g.k), y_ref(out), work(cpu::conv2d_workspace(g));
  cpu::conv2d_backward_filter<double>(g, xd.data(), dyd.data(), dw_ref.data(), db_ref.data(),
                                      work.data());
  cpu::conv2d_forward<double>(g, xd.data(), wd.data(), bd.data(), y_ref.data(), work.data());
  constexpr std::size_t kGuard = 64;  // elements past each output, which must stay -7
  std::vector<float> dyb(out), dw(wn + kGuard, -7.f), db(g.k + kGuard, -7.f);
  std::vector<float> yb(out + kGuard, -7.f), y(out);
  blocked::from_cnhw(block, g.k, g.n, ohw, dy.data(), dyb.data());
  if constexpr (kAvx2Build) {
    blocked::image_filter_grad(block, g, x.data(), dyb.data(), dw.data(), db.data());
    blocked::image_conv_forward(block, g, x.data(), w.data(), b.data(), yb.data());
  }
  const auto intact = [](const std::vector<float>& v, std::size_t n) {
    return std::all_of(v.begin() + n, v.end(), [](float f) { return f == -7.f; });
  };
  const bool guards = intact(dw, wn) && intact(db, g.k) && intact(yb, out);
  blocked::to_cnhw(block, g.k, g.n, ohw, yb.data(), y.data());
  std::vector<float> grad(dw.begin(), dw.begin() + wn);
  grad.insert(grad.end(), db.begin(), db.begin() + g.k);
  std::vector<double> grad_ref(dw_ref);
  grad_ref.insert(grad_ref.end(), db_ref.begin(), db_ref.end());
  return {worst_of(grad, grad_ref), worst_of(y, y_ref), guards};
}

class ImageConv : public ::testing::TestWithParam<std::tuple<int, ConvGeom>> {};

TEST_P(ImageConv, MatchesTheReferenceInDouble) {
  if constexpr (!kAvx2Build) {
    GTEST_SKIP() << "this build has no AVX2+FMA kernels";
  } else {
    const auto [block, g] = GetParam();
    // Gradient: float sums over one image (<= 784 products), double over images: rounding of
    // order 1e-5 (9.5e-6 seen at 28x28). Forward: float sums of <= 49 products. A wrong tap, lane
    // or border is off by the size of a term.
    const Differences d = worst_difference(block, g);
    EXPECT_LT(d.grad, 3e-5);
    EXPECT_LT(d.forward, 1e-5);
    EXPECT_TRUE(d.guards_intact);
  }
}

// 24 channels at block 8: three lane groups, the last one alone.
TEST(ImageConv, AnOddNumberOfLaneGroups) {
  if constexpr (!kAvx2Build) {
    GTEST_SKIP() << "this build has no AVX2+FMA kernels";
  } else {
    const Differences d = worst_difference(8, ConvGeom{2, 1, 12, 10, 24, 5, 2});
    EXPECT_LT(d.grad, 3e-5);
    EXPECT_LT(d.forward, 1e-5);
    EXPECT_TRUE(d.guards_intact);
  }
}

INSTANTIATE_TEST_SUITE_P(
    BlocksAndGeometries, ImageConv,
    ::testing::Combine(
        ::testing::Values(8, 16),
        ::testing::Values(ConvGeom{3, 1, 28, 28, 16, 5, 2},  // layer1
                          ConvGeom{2, 1, 9, 7, 32, 3, 1}, ConvGeom{2, 1, 6, 5, 16, 1, 0},
                          ConvGeom{2, 1, 8, 9, 16, 4, 0}, ConvGeom{2, 1, 7, 6, 16, 2, 1},
                          ConvGeom{2, 1, 9, 11, 16, 6, 2}, ConvGeom{2, 1, 10, 8, 16, 7, 3},
                          ConvGeom{2, 1, 4, 3, 16, 3, 1},     // rows < 5
                          ConvGeom{2, 1, 5, 4, 16, 3, 3})));  // pad > R

TEST(ImageConv, RefusesWhatItCannotCompute) {
  if constexpr (!kAvx2Build) {
    GTEST_SKIP() << "this build has no AVX2+FMA kernels";
  } else {
    std::vector<float> buf(4096);
    const auto call = [&](int block, ConvGeom g) {
      blocked::image_filter_grad(block, g, buf.data(), buf.data(), buf.data(), buf.data());
    };
    EXPECT_DEATH(blocked::image_conv_forward(8, ConvGeom{1, 2, 8, 8, 16, 3, 1}, buf.data(),
                                             buf.data(), buf.data(), buf.data()),
                 "1 input channel");
    EXPECT_DEATH(call(8, ConvGeom{1, 2, 8, 8, 16, 3, 1}), "1 input channel");
    EXPECT_DEATH(call(16, ConvGeom{1, 1, 8, 8, 24, 3, 1}), "1 input channel");
    EXPECT_DEATH(call(8, ConvGeom{1, 1, 8, 8, 16, 9, 4}), "filter width 1..7");
    EXPECT_DEATH(call(8, ConvGeom{1, 1, 4, 4, 16, 7, 1}), "within the padded image");
    EXPECT_DEATH(call(8, ConvGeom{1, 1, 8, 8, 16, 3, -1}), "within the padded image");
    EXPECT_DEATH(call(4, ConvGeom{1, 1, 8, 8, 16, 3, 1}), "8 or 16");
  }
}

// The backend's choice: ours at block 8 (oneDNN's filter gradient for the image would copy the
// output gradient out of the blocked layout there, and its AVX2 forward is slower; layer2's
// filter gradient is conv2_filter_grad_avx2.cpp's, see conv2_filter_grad_avx2_test.cpp); oneDNN's
// AVX-512 kernels at block 16. The start-up line names ours where they run.
TEST(ImageConv, TheBackendNamesItWhereItRuns) {
  // At one thread per rank (the default of a run), where layer2's filter gradient is ours too.
  const DnnlLayout l = [] {
    const testing::ComputeThreads scope(1);
    return dnnl_layout();
  }();
  if (!kAvx2Build) {
    EXPECT_EQ(l.own, "");
  } else if (l.block == 16) {
    EXPECT_EQ(l.own, "") << "oneDNN has an AVX-512 kernel on nChw16c: " << l.convolution;
  } else {
    EXPECT_EQ(l.own, "layer1 forward and filter gradient, layer2 filter gradient: mnist_ddp avx2")
        << l.convolution;
  }
}

}  // namespace
}  // namespace mnist_ddp
