// gradcheck_test.cpp — every CPU op's backward against central finite differences in double, the
// fused BN->ReLU->pool op against the composition of the unfused ops, and float vs double forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "../common/compare.hpp"
#include "mnist_ddp/base/rng.hpp"
#include "ops/cpu/cpu_kernels.hpp"

namespace mnist_ddp::cpu {
namespace {

using Vec = std::vector<double>;

Vec random_vec(std::size_t n, std::uint64_t seed, float lo = -1, float hi = 1) {
  SplitMix64 r(seed);
  Vec v(n);
  for (auto& x : v) x = r.uniform(lo, hi);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic d(loss)/d(input) where loss = <f(input), weights> against central differences
// at every element of `input` (or every `stride`-th for large inputs).
void expect_grad(const std::function<Vec(const Vec&)>& f, Vec input, const Vec& analytic,
                 const Vec& weights, std::size_t stride = 1, double tol = 1e-6) {
  ASSERT_EQ(input.size(), analytic.size());
  const double h = 1e-6;
  double worst = 0;
  for (std::size_t i = 0; i < input.size(); i += stride) {
    const double keep = input[i];
    input[i] = keep + h;
    const double up = dot(f(input), weights);
    input[i] = keep - h;
    const double down = dot(f(input), weights);
    input[i] = keep;
    const double numeric = (up - down) / (2 * h);
    const double err = std::abs(numeric - analytic[i]) / std::max(1.0, std::abs(numeric));
    worst = testing::worst_of(worst, err);
    EXPECT_NEAR(numeric, analytic[i], tol * std::max(1.0, std::abs(numeric))) << "element " << i;
  }
  ::testing::Test::RecordProperty("max_rel_error", std::to_string(worst));
}

struct ConvCase {
  ConvGeom g;
};

class ConvGrad : public ::testing::TestWithParam<ConvGeom> {};

TEST_P(ConvGrad, ForwardMatchesDirectSum) {
  const ConvGeom g = GetParam();
  const Vec x = random_vec(static_cast<std::size_t>(g.c) * g.n * g.h * g.w, 1);
  const Vec w = random_vec(static_cast<std::size_t>(g.k) * g.c * g.r * g.r, 2);
  const Vec b = random_vec(g.k, 3);
  Vec y(static_cast<std::size_t>(g.k) * g.n * g.out_h() * g.out_w());
  Vec work(conv2d_workspace(g));
  conv2d_forward(g, x.data(), w.data(), b.data(), y.data(), work.data());
  // Direct definition: y[k][n][oy][ox] = b[k] + sum_c,ky,kx w[k][c][ky][kx]
  // x[c][n][oy+ky-p][ox+kx-p]
  for (int k = 0; k < g.k; ++k)
    for (int n = 0; n < g.n; ++n)
      for (int oy = 0; oy < g.out_h(); ++oy)
        for (int ox = 0; ox < g.out_w(); ++ox) {
          double s = b[k];
          for (int c = 0; c < g.c; ++c)
            for (int ky = 0; ky < g.r; ++ky)
              for (int kx = 0; kx < g.r; ++kx) {
                const int iy = oy + ky - g.pad, ix = ox + kx - g.pad;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                s += w[((k * g.c + c) * g.r + ky) * g.r + kx] *
                     x[((static_cast<std::size_t>(c) * g.n + n) * g.h + iy) * g.w + ix];
              }
          EXPECT_NEAR(
              y[((static_cast<std::size_t>(k) * g.n + n) * g.out_h() + oy) * g.out_w() + ox], s,
              1e-12);
        }
}

TEST_P(ConvGrad, BackwardMatchesFiniteDifferences) {
  const ConvGeom g = GetParam();
  const Vec x = random_vec(static_cast<std::size_t>(g.c) * g.n * g.h * g.w, 1);
  const Vec w = random_vec(static_cast<std::size_t>(g.k) * g.c * g.r * g.r, 2);
  const Vec b = random_vec(g.k, 3);
  const std::size_t ny = static_cast<std::size_t>(g.k) * g.n * g.out_h() * g.out_w();
  const Vec dy = random_vec(ny, 4);
  Vec work(conv2d_workspace(g));
  Vec dw(w.size()), db(b.size()), dx(x.size());
  conv2d_backward_filter(g, x.data(), dy.data(), dw.data(), db.data(), work.data());
  conv2d_backward_data(g, w.data(), dy.data(), dx.data(), work.data());
  auto fwd = [&](const Vec& xx, const Vec& ww, const Vec& bb) {
    Vec y(ny), wk(conv2d_workspace(g));
    conv2d_forward(g, xx.data(), ww.data(), bb.data(), y.data(), wk.data());
    return y;
  };
  expect_grad([&](const Vec& v) { return fwd(x, v, b); }, w, dw, dy);
  expect_grad([&](const Vec& v) { return fwd(x, w, v); }, b, db, dy);
  expect_grad([&](const Vec& v) { return fwd(v, w, b); }, x, dx, dy, 3);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvGrad,
                         ::testing::Values(ConvGeom{3, 1, 6, 6, 2, 5, 2},     // layer1-like
                                           ConvGeom{2, 3, 5, 5, 4, 3, 1},     // odd sizes
                                           ConvGeom{5, 2, 4, 4, 3, 5, 2, 2},  // chunked im2col
                                           ConvGeom{2, 2, 6, 6, 2, 3, 0}));   // no padding

TEST(BatchNormGrad, TrainBackwardMatchesFiniteDifferences) {
  const int c = 3;
  const std::size_t m = 10;
  const Vec x = random_vec(c * m, 1, -2, 3), gamma = random_vec(c, 2, 0.5f, 1.5f),
            beta = random_vec(c, 3);
  const Vec dy = random_vec(c * m, 4);
  auto fwd = [&](const Vec& xx, const Vec& gg, const Vec& bb) {
    Vec y(c * m), mean(c), inv(c), rm(c, 0.0), rv(c, 1.0);
    batchnorm_forward_train(c, m, xx.data(), gg.data(), bb.data(), 1e-5, 0.1, y.data(), mean.data(),
                            inv.data(), rm.data(), rv.data());
    return y;
  };
  Vec y(c * m), mean(c), inv(c), rm(c, 0.0), rv(c, 1.0), dx(c * m), dg(c), db(c);
  batchnorm_forward_train(c, m, x.data(), gamma.data(), beta.data(), 1e-5, 0.1, y.data(),
                          mean.data(), inv.data(), rm.data(), rv.data());
  batchnorm_backward(c, m, x.data(), dy.data(), gamma.data(), mean.data(), inv.data(), dx.data(),
                     dg.data(), db.data());
  expect_grad([&](const Vec& v) { return fwd(v, gamma, beta); }, x, dx, dy, 1, 1e-5);
  expect_grad([&](const Vec& v) { return fwd(x, v, beta); }, gamma, dg, dy);
  expect_grad([&](const Vec& v) { return fwd(x, gamma, v); }, beta, db, dy);
}

TEST(BatchNormStats, RunningStatisticsFollowPyTorch) {
  // x = [1, 2, 3, 4] for one channel: mean 2.5, biased var 1.25, unbiased 5/3.
  const Vec x = {1, 2, 3, 4}, g = {1}, b = {0};
  Vec y(4), mean(1), inv(1), rm = {0.5}, rv = {2.0};
  batchnorm_forward_train(1, 4, x.data(), g.data(), b.data(), 1e-5, 0.1, y.data(), mean.data(),
                          inv.data(), rm.data(), rv.data());
  EXPECT_DOUBLE_EQ(mean[0], 2.5);
  EXPECT_NEAR(inv[0], 1 / std::sqrt(1.25 + 1e-5), 1e-12);
  EXPECT_NEAR(rm[0], 0.9 * 0.5 + 0.1 * 2.5, 1e-12);
  EXPECT_NEAR(rv[0], 0.9 * 2.0 + 0.1 * (5.0 / 3.0), 1e-12);
  EXPECT_NEAR(y[0], (1 - 2.5) / std::sqrt(1.25 + 1e-5), 1e-12);
}

TEST(BatchNormGrad, EvalBackwardMatchesFiniteDifferences) {
  const int c = 2;
  const std::size_t m = 7;
  const Vec x = random_vec(c * m, 1), gamma = random_vec(c, 2), beta = random_vec(c, 3),
            rm = random_vec(c, 5), rv = random_vec(c, 6, 0.5f, 2.0f), dy = random_vec(c * m, 4);
  auto fwd = [&](const Vec& xx, const Vec& gg, const Vec& bb) {
    Vec y(c * m);
    batchnorm_forward_eval(c, m, xx.data(), gg.data(), bb.data(), rm.data(), rv.data(), 1e-5,
                           y.data());
    return y;
  };
  Vec dx(c * m), dg(c), db(c);
  batchnorm_backward_eval(c, m, x.data(), dy.data(), gamma.data(), rm.data(), rv.data(), 1e-5,
                          dx.data(), dg.data(), db.data());
  expect_grad([&](const Vec& v) { return fwd(v, gamma, beta); }, x, dx, dy);
  expect_grad([&](const Vec& v) { return fwd(x, v, beta); }, gamma, dg, dy);
  expect_grad([&](const Vec& v) { return fwd(x, gamma, v); }, beta, db, dy);
}

TEST(ReluGrad, MatchesFiniteDifferences) {
  const Vec x = random_vec(50, 1), dy = random_vec(50, 2);
  Vec y(50), dx(50);
  relu_forward(50, x.data(), y.data());
  relu_backward(50, y.data(), dy.data(), dx.data());
  expect_grad(
      [&](const Vec& v) {
        Vec o(50);
        relu_forward(50, v.data(), o.data());
        return o;
      },
      x, dx, dy);
}

TEST(MaxPoolGrad, MatchesFiniteDifferencesAndFirstMaxWinsTies) {
  const std::size_t planes = 3;
  const int h = 4, w = 6;
  const Vec x = random_vec(planes * h * w, 1), dy = random_vec(planes * h * w / 4, 2);
  Vec y(dy.size()), dx(x.size());
  std::vector<std::uint8_t> arg(dy.size());
  maxpool2x2_forward(planes, h, w, x.data(), y.data(), arg.data());
  maxpool2x2_backward(planes, h, w, dy.data(), arg.data(), dx.data());
  expect_grad(
      [&](const Vec& v) {
        Vec o(dy.size());
        std::vector<std::uint8_t> a(dy.size());
        maxpool2x2_forward(planes, h, w, v.data(), o.data(), a.data());
        return o;
      },
      x, dx, dy);
  // Ties: all four equal -> index 0; right column ties with bottom-left -> top-right (1) first.
  const Vec t = {1, 1, 0, 2, 1, 1, 2, 0};  // one plane 2x4: windows {1,1,1,1}, {0,2,2,0}
  Vec ty(2);
  std::uint8_t ta[2];
  maxpool2x2_forward(1, 2, 4, t.data(), ty.data(), ta);
  EXPECT_EQ(ta[0], 0);
  EXPECT_EQ(ta[1], 1);
}

TEST(FusedBnReluPool, EqualsCompositionForwardAndBackward) {
  for (bool batch_stats : {true, false}) {
    const int c = 3, n = 4, h = 6, w = 4;
    const std::size_t m = static_cast<std::size_t>(n) * h * w;
    Vec x = random_vec(c * m, 1, -2, 2);
    // Plant exact ties (constant background, as in real images) in channel 0.
    for (std::size_t i = 0; i < 8; ++i) x[i] = 0.25;
    const Vec gamma = random_vec(c, 2, -1.5f, 1.5f), beta = random_vec(c, 3);
    const Vec dyp = random_vec(c * m / 4, 4);
    Vec mean(c), inv(c), rm(c, 0.1), rv(c, 1.3);
    if (batch_stats) {
      batchnorm_stats(c, m, x.data(), 1e-5, 0.1, mean.data(), inv.data(), rm.data(), rv.data());
    } else {
      batchnorm_eval_stats(c, rm.data(), rv.data(), 1e-5, mean.data(), inv.data());
    }
    // Composition: BN apply -> ReLU -> pool.
    Vec bn(c * m), rl(c * m), ref(c * m / 4);
    std::vector<std::uint8_t> ref_arg(c * m / 4), arg(c * m / 4);
    for (int ch = 0; ch < c; ++ch)
      for (std::size_t i = 0; i < m; ++i)
        bn[ch * m + i] = gamma[ch] * (x[ch * m + i] - mean[ch]) * inv[ch] + beta[ch];
    relu_forward(bn.size(), bn.data(), rl.data());
    maxpool2x2_forward(static_cast<std::size_t>(c) * n, h, w, rl.data(), ref.data(),
                       ref_arg.data());
    Vec y(c * m / 4);
    bn_relu_pool_forward(c, n, h, w, x.data(), gamma.data(), beta.data(), mean.data(), inv.data(),
                         y.data(), arg.data());
    for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-12) << i;
    // Backward: the fused op against pool -> relu -> BN backward of the composition.
    Vec d_rl(c * m), d_bn(c * m), dx_ref(c * m), dg_ref(c), db_ref(c);
    maxpool2x2_backward(static_cast<std::size_t>(c) * n, h, w, dyp.data(), ref_arg.data(),
                        d_rl.data());
    relu_backward(rl.size(), rl.data(), d_rl.data(), d_bn.data());
    if (batch_stats) {
      batchnorm_backward(c, m, x.data(), d_bn.data(), gamma.data(), mean.data(), inv.data(),
                         dx_ref.data(), dg_ref.data(), db_ref.data());
    } else {
      batchnorm_backward_eval(c, m, x.data(), d_bn.data(), gamma.data(), rm.data(), rv.data(), 1e-5,
                              dx_ref.data(), dg_ref.data(), db_ref.data());
    }
    Vec dx(c * m), dg(c), db(c);
    bn_relu_pool_backward(c, n, h, w, x.data(), y.data(), dyp.data(), arg.data(), gamma.data(),
                          mean.data(), inv.data(), batch_stats, dx.data(), dg.data(), db.data());
    for (std::size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx[i], dx_ref[i], 1e-10) << i;
    for (int ch = 0; ch < c; ++ch) {
      EXPECT_NEAR(dg[ch], dg_ref[ch], 1e-10);
      EXPECT_NEAR(db[ch], db_ref[ch], 1e-10);
    }
  }
}

TEST(LinearGrad, MatchesFiniteDifferences) {
  const int n = 4, in = 7, out = 3;
  const Vec x = random_vec(n * in, 1), w = random_vec(out * in, 2), b = random_vec(out, 3),
            dy = random_vec(n * out, 4);
  Vec dx(x.size()), dw(w.size()), db(b.size());
  linear_backward(n, in, out, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
  auto fwd = [&](const Vec& xx, const Vec& ww, const Vec& bb) {
    Vec y(n * out);
    linear_forward(n, in, out, xx.data(), ww.data(), bb.data(), y.data());
    return y;
  };
  expect_grad([&](const Vec& v) { return fwd(v, w, b); }, x, dx, dy);
  expect_grad([&](const Vec& v) { return fwd(x, v, b); }, w, dw, dy);
  expect_grad([&](const Vec& v) { return fwd(x, w, v); }, b, db, dy);
}

TEST(SoftmaxCrossEntropy, ValueGradientAndTopK) {
  const int n = 5, k = 10;
  const Vec z = random_vec(n * k, 1, -3, 3);
  const std::vector<std::int32_t> labels = {0, 3, 9, 5, 5};
  Vec dz(z.size());
  const double loss = softmax_cross_entropy(n, k, z.data(), labels.data(), dz.data(), 1.0 / n);
  // Value: -log softmax computed directly.
  double expect = 0;
  for (int i = 0; i < n; ++i) {
    double s = 0;
    for (int j = 0; j < k; ++j) s += std::exp(z[i * k + j]);
    expect += std::log(s) - z[i * k + labels[i]];
  }
  EXPECT_NEAR(loss, expect, 1e-10);
  const Vec ones(1, 1.0);
  expect_grad(
      [&](const Vec& v) {
        return Vec{softmax_cross_entropy(n, k, v.data(), labels.data(),
                                         static_cast<double*>(nullptr), 1.0) /
                   n};
      },
      z, dz, ones);
  // top-k: row 0 has logits 0..9 ascending -> label 9 is top-1, label 5 is in the top 5, 4 not.
  Vec asc(10);
  for (int j = 0; j < 10; ++j) asc[j] = j;
  const std::int32_t l9 = 9, l5 = 5, l4 = 4;
  EXPECT_EQ(topk_correct(1, 10, asc.data(), &l9, 1), 1);
  EXPECT_EQ(topk_correct(1, 10, asc.data(), &l5, 1), 0);
  EXPECT_EQ(topk_correct(1, 10, asc.data(), &l5, 5), 1);
  EXPECT_EQ(topk_correct(1, 10, asc.data(), &l4, 5), 0);
}

TEST(Layout, TransposeRoundTrip) {
  const int c = 3, n = 4, hw = 5;
  const Vec x = random_vec(c * n * hw, 1);
  Vec y(x.size()), z(x.size());
  cnhw_to_nchw(c, n, hw, x.data(), y.data());
  EXPECT_EQ(y[(1 * c + 2) * hw + 3], x[(2 * n + 1) * hw + 3]);
  nchw_to_cnhw(c, n, hw, y.data(), z.data());
  EXPECT_EQ(z, x);
}

TEST(FloatVsDouble, ConvForwardAgrees) {
  const ConvGeom g{4, 3, 8, 8, 5, 5, 2};
  const Vec xd = random_vec(static_cast<std::size_t>(g.c) * g.n * g.h * g.w, 1),
            wd = random_vec(static_cast<std::size_t>(g.k) * g.c * 25, 2), bd = random_vec(g.k, 3);
  std::vector<float> xf(xd.begin(), xd.end()), wf(wd.begin(), wd.end()), bf(bd.begin(), bd.end());
  const std::size_t ny = static_cast<std::size_t>(g.k) * g.n * 64;
  Vec yd(ny), workd(conv2d_workspace(g));
  std::vector<float> yf(ny), workf(conv2d_workspace(g));
  conv2d_forward(g, xd.data(), wd.data(), bd.data(), yd.data(), workd.data());
  conv2d_forward(g, xf.data(), wf.data(), bf.data(), yf.data(), workf.data());
  // The float inputs are the double ones rounded (relative error <= u each), and the float sums
  // (im2col + SGEMM, in whatever order this CPU's kernels add) hold K = C*R*R products and the
  // bias: per element |yf - yd| <= gamma_{K+3} * (sum |x||w| + |b|), the worst case of any
  // summation order (compare.hpp), so no kernel family can exceed it.
  Vec xa(xd), wa(wd), ba(bd), ya(ny);
  for (Vec* v : {&xa, &wa, &ba})
    for (double& e : *v) e = std::abs(e);
  conv2d_forward(g, xa.data(), wa.data(), ba.data(), ya.data(), workd.data());
  const double gamma = testing::float32_gamma(g.c * g.r * g.r + 3);
  double worst = 0;
  for (std::size_t i = 0; i < ny; ++i) {
    EXPECT_LE(std::abs(yf[i] - yd[i]), gamma * ya[i]) << "element " << i;
    worst = std::max(worst, std::abs(yf[i] - yd[i]) / (gamma * ya[i]));
  }
  // Float rounding shows (the comparison is not between identical numbers).
  EXPECT_GT(worst, 0.0);
}

}  // namespace
}  // namespace mnist_ddp::cpu
