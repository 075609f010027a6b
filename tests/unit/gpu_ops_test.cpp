// gpu_ops_test.cpp — the CUDA backend against the CPU reference, through the Ops interface (no
// CUDA headers needed): every op with abs + rel tolerance and the max error printed, a full
// training step of the model (TF32 off), and a GPU-trained checkpoint evaluated on CPU. Every
// test skips with the reason when no GPU is visible (no driver, CPU-only build).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../common/compare.hpp"
#include "../common/gpu_probe.hpp"
#include "mnist_ddp/base/amp_mode.hpp"
#include "mnist_ddp/base/choices.hpp"
#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/launch/device.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/model/optimizer.hpp"
#include "mnist_ddp/model/tensor.hpp"
#include "mnist_ddp/ops/grad_scaler.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "ops/cpu/cpu_kernels.hpp"

namespace mnist_ddp {
namespace {

class GpuOps : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    use_cuda_device(0);
    gpu_ = make_cuda_ops({.tf32 = false});
    cpu_ = make_cpu_ops();
  }
  // A device copy of host data (freed with the test).
  float* dev(const std::vector<float>& h) {
    tensors_.emplace_back(std::vector<int>{static_cast<int>(std::max<std::size_t>(1, h.size()))},
                          Device::Cuda);
    gpu_->upload(h.data(), tensors_.back().data(), h.size() * sizeof(float));
    return tensors_.back().data();
  }
  float* dev_zeros(std::size_t n) { return dev(std::vector<float>(n, 0.f)); }
  std::vector<float> host(const float* d, std::size_t n) {
    std::vector<float> h(n);
    gpu_->download(d, h.data(), n * sizeof(float));
    return h;
  }
  // Max |a-b| over elements must be <= atol + rtol * |b|; prints the max error.
  static void expect_close(const char* what, const std::vector<float>& got,
                           const std::vector<float>& want, double atol, double rtol) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double worst = 0;
    std::size_t at = 0, nonfinite = 0, first_nonfinite = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (!std::isfinite(got[i]) || !std::isfinite(want[i])) {
        if (nonfinite++ == 0) first_nonfinite = i;  // NaN/inf never passes
        continue;
      }
      const double err = std::abs(double(got[i]) - want[i]) - rtol * std::abs(double(want[i]));
      if (err > worst) worst = err, at = i;
    }
    std::printf("%-28s max error beyond rtol: %.3g (element %zu), %zu non-finite\n", what, worst,
                at, nonfinite);
    EXPECT_EQ(nonfinite, 0u) << what << ": element " << first_nonfinite << " is "
                             << got[first_nonfinite] << " vs " << want[first_nonfinite];
    EXPECT_LE(worst, atol) << what << " element " << at << ": " << got[at] << " vs " << want[at];
  }
  static std::vector<float> rnd(std::size_t n, std::uint64_t seed, float lo = -1, float hi = 1) {
    SplitMix64 r(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = r.uniform(lo, hi);
    return v;
  }
  static std::vector<float> nchw(int c, int n, int hw, const std::vector<float>& cnhw) {
    std::vector<float> out(cnhw.size());
    cpu::cnhw_to_nchw(c, n, hw, cnhw.data(), out.data());
    return out;
  }
  std::unique_ptr<Ops> gpu_, cpu_;
  std::vector<Tensor> tensors_;
};

// One input channel runs the direct kernels (direct_conv.cuh; at batch 100 their weight gradient
// is split over 32 blocks per channel of 3-4 images), the others cuDNN. Beyond the model's shape
// (padded width 32: float4 row segments): 3x3 on a non-square image whose rows end inside a 4-wide
// run; 64 channels (8 blocks per channel of 5 images: two shared-memory loads, 4 + 1); and two
// unpadded 3x3 shapes whose last run reads its row segment 3-4 floats into the next row, the next
// image and the zero margin, with scalar loads (width 7) and float4 loads (width 8).
TEST_F(GpuOps, ConvolutionsMatchCpu) {
  for (const ConvGeom g :
       {ConvGeom{8, 1, 28, 28, 16, 5, 2}, ConvGeom{100, 1, 28, 28, 16, 5, 2},
        ConvGeom{5, 1, 9, 7, 6, 3, 1}, ConvGeom{40, 1, 12, 10, 64, 5, 2},
        ConvGeom{9, 1, 7, 7, 64, 3, 0}, ConvGeom{9, 1, 6, 8, 64, 3, 0},
        ConvGeom{8, 16, 14, 14, 32, 5, 2}, ConvGeom{100, 16, 14, 14, 32, 5, 2}}) {
    std::printf("conv n=%d c=%d %dx%d k=%d r=%d pad=%d\n", g.n, g.c, g.h, g.w, g.k, g.r, g.pad);
    const int ihw = g.h * g.w, ohw = g.out_h() * g.out_w();
    const auto x = rnd(static_cast<std::size_t>(g.c) * g.n * ihw, 1);  // CNHW for the reference
    const auto w = rnd(static_cast<std::size_t>(g.k) * g.c * g.r * g.r, 2), b = rnd(g.k, 3);
    const auto dy = rnd(static_cast<std::size_t>(g.k) * g.n * ohw, 4);
    std::vector<float> y(dy.size()), dw(w.size()), db(g.k), dx(x.size());
    cpu_->conv2d_forward(g, x.data(), w.data(), b.data(), y.data());
    cpu_->conv2d_backward_filter(g, x.data(), dy.data(), dw.data(), db.data());
    float* gx = dev(nchw(g.c, g.n, ihw, x));
    float* gw = dev(w);
    float* gdy = dev(nchw(g.k, g.n, ohw, dy));
    float* gy = dev_zeros(y.size());
    float* gdw = dev_zeros(w.size());
    float* gdb = dev_zeros(g.k);
    gpu_->conv2d_forward(g, gx, gw, dev(b), gy);
    gpu_->conv2d_backward_filter(g, gx, gdy, gdw, gdb);
    expect_close("conv forward", host(gy, y.size()), nchw(g.k, g.n, ohw, y), 1e-4, 1e-4);
    expect_close("conv backward filter", host(gdw, w.size()), dw, 1e-3, 1e-4);
    expect_close("conv backward bias", host(gdb, g.k), db, 1e-3, 1e-4);
    // Deterministic: the same inputs give bitwise the same outputs (fixed reduction order).
    float* gy2 = dev_zeros(y.size());
    float* gdw2 = dev_zeros(w.size());
    float* gdb2 = dev_zeros(g.k);
    gpu_->conv2d_forward(g, gx, gw, dev(b), gy2);
    gpu_->conv2d_backward_filter(g, gx, gdy, gdw2, gdb2);
    EXPECT_EQ(host(gy2, y.size()), host(gy, y.size())) << "conv forward not bitwise repeatable";
    EXPECT_EQ(host(gdw2, w.size()), host(gdw, w.size())) << "conv weight gradient not repeatable";
    EXPECT_EQ(host(gdb2, g.k), host(gdb, g.k)) << "conv bias gradient not repeatable";
    // The training forward's BN statistics of y right after the convolution (direct kernels: from
    // the partial moments the convolution wrote; cuDNN: a pass over y), against the CPU's. The
    // buffers first: an upload makes CudaOps forget the convolution's moments.
    const std::vector<float> rm0(g.k, 0.1f), rv0(g.k, 1.2f);
    std::vector<float> m(g.k), is(g.k), rm = rm0, rv = rv0;
    float* gm = dev_zeros(g.k);
    float* gis = dev_zeros(g.k);
    float* grm = dev(rm);
    float* grv = dev(rv);
    float* gb = dev(b);
    float* gy3 = dev_zeros(y.size());
    cpu_->batchnorm_stats(g.k, g.n, ohw, y.data(), 1e-5, 0.1, m.data(), is.data(), rm.data(),
                          rv.data());
    gpu_->conv2d_forward(g, gx, gw, gb, gy3);
    gpu_->batchnorm_stats(g.k, g.n, ohw, gy3, 1e-5, 0.1, gm, gis, grm, grv);
    expect_close("bn mean of conv output", host(gm, g.k), m, 1e-5, 1e-5);
    expect_close("bn invstd of conv output", host(gis, g.k), is, 1e-5, 1e-4);
    expect_close("bn running mean of conv", host(grm, g.k), rm, 1e-5, 1e-5);
    expect_close("bn running var of conv", host(grv, g.k), rv, 1e-5, 1e-4);
    // Again from a pass over y (the uploads below make CudaOps forget the moments): the same
    // statistics up to the summation order.
    float* gm2 = dev_zeros(g.k);
    float* gis2 = dev_zeros(g.k);
    float* grm2 = dev(rm0);
    float* grv2 = dev(rv0);
    gpu_->batchnorm_stats(g.k, g.n, ohw, gy3, 1e-5, 0.1, gm2, gis2, grm2, grv2);
    expect_close("bn mean, pass vs conv's", host(gm2, g.k), host(gm, g.k), 1e-6, 1e-6);
    expect_close("bn invstd, pass vs conv's", host(gis2, g.k), host(gis, g.k), 1e-6, 1e-6);
    if (g.c > 1) {
      cpu_->conv2d_backward_data(g, w.data(), dy.data(), dx.data());
      float* gdx = dev_zeros(x.size());
      gpu_->conv2d_backward_data(g, gw, gdy, gdx);
      expect_close("conv backward data", host(gdx, x.size()), nchw(g.c, g.n, ihw, dx), 1e-4, 1e-4);
      // Both gradients in one call (the filter gradient on CudaOps' second stream, concurrent
      // with the data gradient): bitwise the results of the two calls above, twice in a row (the
      // second reuses the side stream's workspace and events).
      for (int round = 0; round < 2; ++round) {
        float* gdw4 = dev_zeros(w.size());
        float* gdb4 = dev_zeros(g.k);
        float* gdx4 = dev_zeros(x.size());
        gpu_->conv2d_backward(g, gx, gw, gdy, gdw4, gdb4, gdx4);
        EXPECT_EQ(host(gdw4, w.size()), host(gdw, w.size())) << "two-stream weight gradient";
        EXPECT_EQ(host(gdb4, g.k), host(gdb, g.k)) << "two-stream bias gradient";
        EXPECT_EQ(host(gdx4, x.size()), host(gdx, x.size())) << "two-stream data gradient";
      }
    }
  }
}

// SyncBatchNorm's exchange with a stand-in for a second rank (its batch: this one's moments
// shifted and scaled, the same count; its gradient sums: a fixed function of this one's), so one
// process drives the GPU's host exchange and the CPU reference through the same numbers.
BnSync two_rank_stand_in() {
  BnSync s;
  s.stats = [](int c, double* mean, double* var, double* count) {
    for (int ch = 0; ch < c; ++ch) {
      const double m1 = mean[ch], v1 = var[ch], m2 = m1 + 0.5, v2 = 2 * v1;
      const double mu = (m1 + m2) / 2;
      mean[ch] = mu;
      var[ch] = (v1 + (m1 - mu) * (m1 - mu) + v2 + (m2 - mu) * (m2 - mu)) / 2;
    }
    *count *= 2;
  };
  s.grad_sums = [](int c, double* sums, double* count) {
    for (int i = 0; i < 2 * c; ++i) sums[i] = 2 * sums[i] + 0.125;
    *count *= 2;
  };
  return s;
}

// --gpu-kernels own: layer2's weight and bias gradients on TF32 tensor cores (wgrad_tf32.cuh)
// against an exact (double) reference, within an error model: each product reads both inputs
// rounded to TF32 (relative error <= 2^-11 each: 2^-10 + 2^-22 together), and a block's FP32
// sum of its images' terms adds at most gamma(terms) = terms 2u / (1 - terms 2u), u = 2^-24 (2u:
// the tensor cores' additions may truncate rather than round); the partials are then added in
// double. The bias is an FP32 sum in order (u). Both bounds scale with the sum of |dy x|, computed
// alongside. Shapes: the model's at batch 8 (where the bound is ~1.6 terms: a dropped or doubled
// image or step of 8 positions fails) and 100, batch 200 (more images than blocks: two per block),
// and 16 filters of 3x3 over 3 channels (one row tile; 27 columns: a ragged last tile, and warps
// 4-7 without tiles). Repeated calls are bitwise equal (a fixed reduction order), and so is the
// two-stream conv2d_backward (the kernel on the side stream beside the data gradient).
TEST_F(GpuOps, OwnWeightGradientMatchesExactWithinTf32Model) {
  const std::unique_ptr<Ops> own = make_cuda_ops({.tf32 = true, .gpu_kernels = GpuKernels::Own});
  for (const ConvGeom g : {ConvGeom{8, 16, 14, 14, 32, 5, 2}, ConvGeom{100, 16, 14, 14, 32, 5, 2},
                           ConvGeom{200, 16, 14, 14, 32, 5, 2}, ConvGeom{6, 3, 9, 11, 16, 3, 1}}) {
    std::printf("own wgrad n=%d c=%d %dx%d k=%d r=%d pad=%d\n", g.n, g.c, g.h, g.w, g.k, g.r,
                g.pad);
    const int oh = g.out_h(), ow = g.out_w();
    const auto x = rnd(static_cast<std::size_t>(g.n) * g.c * g.h * g.w, 11);  // NCHW
    const auto dy = rnd(static_cast<std::size_t>(g.n) * g.k * oh * ow, 12);   // NKHW
    const std::size_t taps = static_cast<std::size_t>(g.c) * g.r * g.r;
    std::vector<double> exact(g.k * taps, 0.0), mag(g.k * taps, 0.0), bias(g.k, 0.0),
        bias_mag(g.k, 0.0);
    for (int i = 0; i < g.n; ++i)
      for (int k = 0; k < g.k; ++k)
        for (int oy = 0; oy < oh; ++oy)
          for (int ox = 0; ox < ow; ++ox) {
            const double d = dy[((static_cast<std::size_t>(i) * g.k + k) * oh + oy) * ow + ox];
            bias[k] += d;
            bias_mag[k] += std::abs(d);
            for (int c = 0; c < g.c; ++c)
              for (int r = 0; r < g.r; ++r)
                for (int t = 0; t < g.r; ++t) {
                  const int iy = oy + r - g.pad, ix = ox + t - g.pad;
                  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                  const double v =
                      x[((static_cast<std::size_t>(i) * g.c + c) * g.h + iy) * g.w + ix];
                  const std::size_t j = k * taps + (c * g.r + r) * g.r + t;
                  exact[j] += d * v;
                  mag[j] += std::abs(d * v);
                }
          }
    // The terms one block adds in FP32: its images' positions (ceil(n / blocks) images).
    const int blocks = std::min(g.n, 128);
    const double terms = static_cast<double>((g.n + blocks - 1) / blocks) * oh * ow;
    const double u = std::ldexp(1.0, -24), gamma = terms * 2 * u / (1 - terms * 2 * u);
    const double gamma_bias = terms * u / (1 - terms * u);
    const double tf32 = std::ldexp(1.0, -10) + std::ldexp(1.0, -22);
    tensors_.clear();
    float* gx = dev(x);
    float* gdy = dev(dy);
    float* gdw = dev_zeros(g.k * taps);
    float* gdb = dev_zeros(g.k);
    own->conv2d_backward_filter(g, gx, gdy, gdw, gdb);
    const auto dw = host(gdw, g.k * taps), db = host(gdb, g.k);
    double worst = 0, worst_bias = 0;
    for (std::size_t j = 0; j < dw.size(); ++j) {
      ASSERT_TRUE(std::isfinite(dw[j])) << "weight gradient element " << j;
      const double bound = (tf32 + gamma) * mag[j] + std::abs(exact[j]) * u;  // + the last rounding
      worst = std::max(worst, std::abs(dw[j] - exact[j]) / bound);
    }
    for (int k = 0; k < g.k; ++k) {
      const double bound = gamma_bias * bias_mag[k] + std::abs(bias[k]) * u;
      worst_bias = std::max(worst_bias, std::abs(db[k] - bias[k]) / std::max(bound, 1e-300));
    }
    std::printf("  worst error / bound: weights %.3g, bias %.3g\n", worst, worst_bias);
    EXPECT_LE(worst, 1.0) << "weight gradient outside the TF32 error model";
    EXPECT_LE(worst_bias, 1.0) << "bias gradient outside the FP32 error model";
    float* gdw2 = dev_zeros(g.k * taps);
    float* gdb2 = dev_zeros(g.k);
    own->conv2d_backward_filter(g, gx, gdy, gdw2, gdb2);
    EXPECT_EQ(host(gdw2, g.k * taps), dw) << "own weight gradient not bitwise repeatable";
    EXPECT_EQ(host(gdb2, g.k), db) << "own bias gradient not bitwise repeatable";
    float* gw = dev(rnd(g.k * taps, 13));
    float* gdw3 = dev_zeros(g.k * taps);
    float* gdb3 = dev_zeros(g.k);
    float* gdx = dev_zeros(x.size());
    own->conv2d_backward(g, gx, gw, gdy, gdw3, gdb3, gdx);
    EXPECT_EQ(host(gdw3, g.k * taps), dw) << "two-stream backward's weight gradient differs";
    EXPECT_EQ(host(gdb3, g.k), db) << "two-stream backward's bias gradient differs";
  }
}

TEST_F(GpuOps, BatchNormReluPoolMatchCpu) {
  const int c = 16, n = 6, h = 8, w = 8, hw = h * w;
  auto x = rnd(static_cast<std::size_t>(c) * n * hw, 5, -2, 2);
  for (int i = 0; i < 12; ++i) x[i] = 0.25f;  // exact ties
  const auto gamma = rnd(c, 6, -1.5f, 1.5f), beta = rnd(c, 7), dy = rnd(x.size() / 4, 8);
  const BnSync stand_in = two_rank_stand_in();
  // Plain BN, then SyncBatchNorm (--sync-bn) through the stand-in exchange.
  for (const BnSync* sync : {static_cast<const BnSync*>(nullptr), &stand_in}) {
    SCOPED_TRACE(sync != nullptr ? "sync-bn" : "bn");
    cpu_->set_bn_sync(sync);
    gpu_->set_bn_sync(sync);
    for (bool train : {true, false}) {
      std::vector<float> m(c), is(c), rm(c, 0.1f), rv(c, 1.2f);
      std::vector<float> grm = rm, grv = rv;
      float* gx = dev(nchw(c, n, hw, x));
      float* gm = dev_zeros(c);
      float* gis = dev_zeros(c);
      float* grm_d = dev(grm);
      float* grv_d = dev(grv);
      if (train) {
        cpu_->batchnorm_stats(c, n, hw, x.data(), 1e-5, 0.1, m.data(), is.data(), rm.data(),
                              rv.data());
        gpu_->batchnorm_stats(c, n, hw, gx, 1e-5, 0.1, gm, gis, grm_d, grv_d);
        expect_close("bn batch mean", host(gm, c), m, 1e-5, 1e-5);
        expect_close("bn batch invstd", host(gis, c), is, 1e-5, 1e-4);
        expect_close("bn running var", host(grv_d, c), rv, 1e-5, 1e-5);
      } else {
        cpu_->batchnorm_eval_stats(c, rm.data(), rv.data(), 1e-5, m.data(), is.data());
        gpu_->batchnorm_eval_stats(c, grm_d, grv_d, 1e-5, gm, gis);
      }
      // Same statistics into both fused ops.
      gm = dev(m);
      gis = dev(is);
      std::vector<float> y(x.size() / 4), dx(x.size()), dg(c), db(c);
      std::vector<std::uint8_t> arg(y.size());
      cpu_->bn_relu_pool_forward(c, n, h, w, x.data(), gamma.data(), beta.data(), m.data(),
                                 is.data(), y.data(), arg.data());
      cpu_->bn_relu_pool_backward(c, n, h, w, x.data(), y.data(), dy.data(), arg.data(),
                                  gamma.data(), m.data(), is.data(), train, dx.data(), dg.data(),
                                  db.data());
      float* gy = dev_zeros(y.size());
      std::uint8_t* garg = gpu_->alloc_bytes(arg.size());
      float* gdx = dev_zeros(dx.size());
      float* gdg = dev_zeros(c);
      float* gdb = dev_zeros(c);
      float* ggamma = dev(gamma);
      gpu_->bn_relu_pool_forward(c, n, h, w, gx, ggamma, dev(beta), gm, gis, gy, garg);
      gpu_->bn_relu_pool_backward(c, n, h, w, gx, gy, dev(nchw(c, n, hw / 4, dy)), garg, ggamma, gm,
                                  gis, train, gdx, gdg, gdb);
      expect_close("bn+relu+pool forward", host(gy, y.size()), nchw(c, n, hw / 4, y), 1e-5, 1e-5);
      expect_close("bn+relu+pool dx", host(gdx, dx.size()), nchw(c, n, hw, dx), 1e-5, 1e-4);
      expect_close("bn dgamma", host(gdg, c), dg, 1e-4, 1e-4);
      expect_close("bn dbeta", host(gdb, c), db, 1e-4, 1e-4);
      gpu_->free_bytes(garg);
    }
  }
  cpu_->set_bn_sync(nullptr);
  gpu_->set_bn_sync(nullptr);
}

TEST_F(GpuOps, LinearLossSgdAndGatherMatchCpu) {
  const int n = 37, in = 1568, out = 10;
  const auto x = rnd(static_cast<std::size_t>(n) * in, 9), w = rnd(out * in, 10), b = rnd(out, 11);
  std::vector<float> y(n * out);
  cpu_->linear_forward(n, in, out, x.data(), w.data(), b.data(), y.data());
  float* gx = dev(x);
  float* gw = dev(w);
  float* gy = dev_zeros(y.size());
  gpu_->linear_forward(n, in, out, gx, gw, dev(b), gy);
  expect_close("linear forward", host(gy, y.size()), y, 1e-4, 1e-4);
  std::vector<std::int32_t> labels(n);
  for (int i = 0; i < n; ++i) labels[i] = (i * 7) % 10;
  auto* glab = reinterpret_cast<std::int32_t*>(gpu_->alloc_bytes(n * sizeof(std::int32_t)));
  gpu_->upload(labels.data(), glab, n * sizeof(std::int32_t));
  std::vector<float> dl(y.size());
  const double loss =
      cpu_->softmax_cross_entropy(n, out, y.data(), labels.data(), dl.data(), 1.0 / n);
  float* gdl = dev_zeros(dl.size());
  const double gloss = gpu_->softmax_cross_entropy(n, out, gy, glab, gdl, 1.0 / n);
  EXPECT_NEAR(gloss, loss, 1e-4 * n);
  expect_close("softmax xent grad", host(gdl, dl.size()), dl, 1e-6, 1e-4);
  EXPECT_EQ(gpu_->topk_correct(n, out, gy, glab, 1),
            cpu_->topk_correct(n, out, y.data(), labels.data(), 1));
  EXPECT_EQ(gpu_->topk_correct(n, out, gy, glab, 5),
            cpu_->topk_correct(n, out, y.data(), labels.data(), 5));
  std::vector<float> dx(x.size()), dw(w.size()), db(out);
  cpu_->linear_backward(n, in, out, x.data(), w.data(), dl.data(), dx.data(), dw.data(), db.data());
  float* gdx = dev_zeros(dx.size());
  float* gdw = dev_zeros(dw.size());
  float* gdb = dev_zeros(out);
  gpu_->linear_backward(n, in, out, gx, gw, gdl, gdx, gdw, gdb);
  expect_close("linear dx", host(gdx, dx.size()), dx, 1e-5, 1e-4);
  expect_close("linear dw", host(gdw, dw.size()), dw, 1e-5, 1e-4);
  expect_close("linear db", host(gdb, out), db, 1e-5, 1e-4);
  // SGD (momentum, nesterov, weight decay), two steps.
  SgdParams s;
  s.lr = 0.1;
  s.momentum = 0.9;
  s.weight_decay = 1e-3;
  s.nesterov = true;
  auto p = w, buf = std::vector<float>(w.size());
  float* gbuf = dev_zeros(w.size());
  for (bool first : {true, false}) {
    cpu::sgd_step(p.size(), p.data(), dw.data(), buf.data(), s, first);
    gpu_->set_step_scalars({0, s.lr, first});
    gpu_->sgd_step(p.size(), gw, gdw, gbuf, s);
  }
  expect_close("sgd parameters", host(gw, p.size()), p, 1e-5, 1e-5);
  // Gather/normalise from the device-resident dataset.
  Dataset d;
  d.count = 50;
  SplitMix64 r(12);
  d.images.resize(50 * kImagePixels);
  d.labels.resize(50);
  for (auto& v : d.images) v = static_cast<std::uint8_t>(r.below(256));
  for (auto& v : d.labels) v = static_cast<std::uint8_t>(r.below(10));
  const std::vector<std::int64_t> order = {49, 3, 17, 17, 0, 25};
  gpu_->load_dataset(Ops::kEvalSplit, d);
  gpu_->set_order(Ops::kEvalSplit, order);
  float* gxb = dev_zeros(4 * kImagePixels);
  gpu_->gather(Ops::kEvalSplit, 2, 4, 0.3f, 0.2f, gxb, glab);
  std::vector<float> xb(4 * kImagePixels);
  std::vector<std::int32_t> yb(4), gyb(4);
  gather_batch(d, std::span<const std::int64_t>(order).subspan(2, 4), 0.3f, 0.2f, xb.data(),
               yb.data());
  expect_close("gather/normalise", host(gxb, xb.size()), xb, 1e-6, 1e-6);
  gpu_->download(glab, gyb.data(), 4 * sizeof(std::int32_t));
  EXPECT_EQ(gyb, yb);
  gpu_->free_bytes(reinterpret_cast<std::uint8_t*>(glab));
}

TEST_F(GpuOps, TrainingStepsMatchCpuAndCheckpointMovesAcross) {
  const int n = 16;
  ConvNet a(*cpu_, n), b(*gpu_, n);
  a.init(31);
  b.init(31);
  const auto x = rnd(static_cast<std::size_t>(n) * 784, 13, -1, 2);
  std::vector<std::int32_t> y(n);
  for (int i = 0; i < n; ++i) y[i] = i % 10;
  float* gx = dev(x);
  auto* gy = reinterpret_cast<std::int32_t*>(gpu_->alloc_bytes(n * sizeof(std::int32_t)));
  gpu_->upload(y.data(), gy, n * sizeof(std::int32_t));
  std::vector<float> dl(n * 10);
  float* gdl = dev_zeros(n * 10);
  SgdParams s;
  s.lr = 0.05;
  s.momentum = 0.9;
  Sgd sa(*cpu_, a.params().size(), s), sb(*gpu_, b.params().size(), s);
  for (int step = 0; step < 3; ++step) {
    cpu_->softmax_cross_entropy(n, 10, a.forward(x.data(), n, Mode::Train), y.data(), dl.data(),
                                1.0 / n);
    a.backward(dl.data(), nullptr);
    cpu_->set_step_scalars({0, 0.05, step == 0});
    sa.step(a.params(), a.grads());
    a.count_train_batch();
    gpu_->softmax_cross_entropy(n, 10, b.forward(gx, n, Mode::Train), gy, gdl, 1.0 / n);
    b.backward(gdl, nullptr);
    gpu_->set_step_scalars({0, 0.05, step == 0});
    sb.step(b.params(), b.grads());
    b.count_train_batch();
  }
  const std::vector<float> pa(a.params().begin(), a.params().end());
  expect_close("params after 3 steps", host(b.params().data(), pa.size()), pa, 1e-4, 1e-3);
  // The BN running statistics each device computed itself (before anything is copied across), and
  // the counters, agree too.
  const std::vector<float> ba(a.buffers().begin(), a.buffers().end());
  expect_close("BN buffers after 3 steps", host(b.buffers().data(), ba.size()), ba, 1e-5, 1e-4);
  EXPECT_EQ(
      std::vector<std::int64_t>(b.num_batches_tracked().begin(), b.num_batches_tracked().end()),
      std::vector<std::int64_t>(a.num_batches_tracked().begin(), a.num_batches_tracked().end()));
  EXPECT_EQ(a.num_batches_tracked()[0], 3);
  // A GPU-trained model's weights evaluated on CPU give the GPU's logits.
  ConvNet c(*cpu_, n);
  const auto pb = host(b.params().data(), pa.size());
  const auto bb = host(b.buffers().data(), b.buffers().size());
  std::copy(pb.begin(), pb.end(), c.params().begin());
  std::copy(bb.begin(), bb.end(), c.buffers().begin());
  const float* lc = c.forward(x.data(), n, Mode::Eval);
  const auto lg = host(b.forward(gx, n, Mode::Eval), n * 10);
  expect_close("cross-device eval logits", lg, std::vector<float>(lc, lc + n * 10), 1e-4, 1e-3);
  gpu_->free_bytes(reinterpret_cast<std::uint8_t*>(gy));
}

// ---- mixed precision (--amp) ------------------------------------------------------------------

// The largest |v| (the scale the 16-bit tolerances are relative to).
float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = static_cast<float>(::mnist_ddp::testing::worst_of(m, std::abs(x)));
  return m;
}

// Both convolutions: layer 1 (C = 1, the shape most likely to lack a 16-bit cuDNN algorithm)
// and layer 2, then the fc GEMMs.
TEST_F(GpuOps, SixteenBitConvolutionsAndGemmsTrackFp32) {
  for (const ConvGeom g : {ConvGeom{8, 1, 28, 28, 16, 5, 2}, ConvGeom{8, 16, 14, 14, 32, 5, 2}}) {
    const std::size_t nx = static_cast<std::size_t>(g.n) * g.c * g.h * g.w;
    const std::size_t ny = static_cast<std::size_t>(g.n) * g.k * g.out_h() * g.out_w();
    const std::size_t nw = static_cast<std::size_t>(g.k) * g.c * g.r * g.r;
    float* x = dev(rnd(nx, 21));
    float* w = dev(rnd(nw, 22, -0.1f, 0.1f));
    float* b = dev(rnd(g.k, 23));
    float* dy = dev(rnd(ny, 24));
    const int n = 8, in = 1568, out = 10;
    float* lx = dev(rnd(static_cast<std::size_t>(n) * in, 25));
    float* lw = dev(rnd(static_cast<std::size_t>(out) * in, 26, -0.05f, 0.05f));
    float* lb = dev(rnd(out, 27));
    float* ldy = dev(rnd(static_cast<std::size_t>(n) * out, 28));
    // Every output of the conv and fc ops, in the precision set on the backend.
    auto outputs = [&](AmpMode mode) {
      gpu_->set_amp(mode, nullptr, nullptr);
      float* y = dev_zeros(ny);
      float* dw = dev_zeros(nw);
      float* db = dev_zeros(g.k);
      float* dx = dev_zeros(nx);
      gpu_->conv2d_forward(g, x, w, b, y);
      gpu_->conv2d_backward_filter(g, x, dy, dw, db);
      if (g.c > 1) gpu_->conv2d_backward_data(g, w, dy, dx);  // layer 1 never needs it
      float* ly = dev_zeros(static_cast<std::size_t>(n) * out);
      float* ldx = dev_zeros(static_cast<std::size_t>(n) * in);
      float* ldw = dev_zeros(static_cast<std::size_t>(out) * in);
      float* ldb = dev_zeros(out);
      gpu_->linear_forward(n, in, out, lx, lw, lb, ly);
      gpu_->linear_backward(n, in, out, lx, lw, ldy, ldx, ldw, ldb);
      gpu_->set_amp(AmpMode::Off, nullptr, nullptr);
      return std::vector<std::vector<float>>{
          host(y, ny),       host(dw, nw),      host(db, g.k),       host(dx, nx),
          host(ly, n * out), host(ldx, n * in), host(ldw, out * in), host(ldb, out)};
    };
    const char* names[] = {"conv y", "conv dw", "conv db", "conv dx",
                           "fc y",   "fc dx",   "fc dw",   "fc db"};
    const auto ref = outputs(AmpMode::Off);
    // 16-bit inputs with fp32 accumulation: errors of a few units in the 16-bit format's last
    // place relative to the output's magnitude (fp16: 2^-11, bf16: 2^-8).
    for (const auto& [mode, tol] :
         {std::pair{AmpMode::Fp16, 4e-3}, std::pair{AmpMode::Bf16, 3e-2}}) {
      const auto got = outputs(mode);
      bool any_differs = false;
      for (std::size_t i = 0; i < ref.size(); ++i) {
        const std::string what = std::string(amp_mode_name(mode)) + " " + names[i];
        expect_close(what.c_str(), got[i], ref[i], tol * max_abs(ref[i]), 0);
        any_differs = any_differs || got[i] != ref[i];
      }
      EXPECT_TRUE(any_differs) << amp_mode_name(mode)
                               << ": bitwise fp32 results, so no 16-bit math ran";
    }
  }
}

TEST_F(GpuOps, GradScalerKernelsFollowTheHostRule) {
  LossScaleRule rule;
  rule.init_scale = 1024;
  rule.growth_interval = 3;
  auto scaler = gpu_->make_grad_scaler(rule);
  LossScalerState want{rule.init_scale, 0};
  // 0: clean, 1: an inf gradient, 2: a NaN gradient.
  const int pattern[] = {0, 0, 0, 0, 1, 0, 0, 0, 2, 2, 0, 0, 0, 0, 0, 0};
  int skips = 0;
  for (int kind : pattern) {
    std::vector<float> g = {3.f, -0.5f, 1e-3f, 7.f, 65504.f};
    if (kind == 1) g[2] = INFINITY;
    if (kind == 2) g[1] = NAN;
    float* d = dev(g);
    const float scale = want.scale;
    scaler->unscale_and_check(std::span<float>(d, g.size()));
    const auto got = host(d, g.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      // A power-of-two scale: unscaling is exact.
      if (std::isfinite(g[i])) {
        EXPECT_EQ(got[i], g[i] / scale) << "element " << i;
      }
    }
    EXPECT_EQ(host(scaler->found_inf(), 1)[0], kind != 0 ? 1.f : 0.f);
    scaler->update();
    update_loss_scale(want, kind != 0, rule);
    skips += kind != 0 ? 1 : 0;
    const LossScalerState st = scaler->state();
    EXPECT_EQ(st.scale, want.scale);
    EXPECT_EQ(st.growth_tracker, want.growth_tracker);
  }
  EXPECT_EQ(skips, 3);
  EXPECT_EQ(scaler->take_skipped(), 3);
  EXPECT_EQ(scaler->take_skipped(), 0);
  scaler->set_state({256.f, 2});
  EXPECT_EQ(scaler->state().scale, 256.f);
  EXPECT_EQ(scaler->state().growth_tracker, 2);
  EXPECT_THROW(scaler->set_state({0.f, 0}), UserError);
}

TEST_F(GpuOps, AmpScalesTheLossGradientAndSkipsTheStepOnInf) {
  auto scaler = gpu_->make_grad_scaler(LossScaleRule{});
  const int n = 16, classes = 10;
  float* logits = dev(rnd(static_cast<std::size_t>(n) * classes, 31, -3, 3));
  std::vector<std::int32_t> labels(n);
  for (int i = 0; i < n; ++i) labels[i] = (i * 3) % 10;
  auto* glab = reinterpret_cast<std::int32_t*>(gpu_->alloc_bytes(n * sizeof(std::int32_t)));
  gpu_->upload(labels.data(), glab, n * sizeof(std::int32_t));
  float* d_plain = dev_zeros(n * classes);
  float* d_scaled = dev_zeros(n * classes);
  gpu_->accumulate_loss(n, classes, logits, glab, d_plain, 1.0 / n);
  const double loss_plain = gpu_->take_loss_sum();
  gpu_->set_amp(AmpMode::Fp16, scaler->scale(), scaler->found_inf());
  gpu_->accumulate_loss(n, classes, logits, glab, d_scaled, 1.0 / n);
  // The loss is summed by atomics in any order: equal up to the last bits, never scaled.
  EXPECT_NEAR(gpu_->take_loss_sum(), loss_plain, 1e-12 * std::abs(loss_plain))
      << "the reported loss is never scaled";
  auto want = host(d_plain, n * classes);
  for (auto& v : want) v *= 65536.f;
  expect_close("scaled dlogits", host(d_scaled, n * classes), want, 0, 1e-6);
  // SGD at the step's values: a no-op while found_inf is set, a normal step otherwise.
  const std::size_t np = 1000;
  const auto p = rnd(np, 32), g = rnd(np, 33), buf = rnd(np, 34);
  float* gp = dev(p);
  float* gg = dev(g);
  float* gb = dev(buf);
  SgdParams s;
  s.lr = 0.1;
  s.momentum = 0.9;
  gpu_->set_step_scalars({0, 0.1, false});
  const float one = 1.f, zero = 0.f;
  gpu_->upload(&one, scaler->found_inf(), sizeof one);
  gpu_->sgd_step(np, gp, gg, gb, s);
  EXPECT_EQ(host(gp, np), p) << "a skipped step moved the parameters";
  EXPECT_EQ(host(gb, np), buf) << "a skipped step moved the momentum";
  gpu_->upload(&zero, scaler->found_inf(), sizeof zero);
  gpu_->sgd_step(np, gp, gg, gb, s);
  auto p_want = p, b_want = buf;
  cpu::sgd_step(np, p_want.data(), g.data(), b_want.data(), s, false);
  expect_close("sgd after a clean step", host(gp, np), p_want, 1e-6, 1e-6);
  gpu_->set_amp(AmpMode::Off, nullptr, nullptr);
  gpu_->free_bytes(reinterpret_cast<std::uint8_t*>(glab));
}

// --amp fp16: the optimizer's first update is the first step that actually updates. A skipped
// first step leaves the momentum buffer untouched, and the next clean step starts it as the
// gradient (PyTorch: the buffer is created by the first optimizer.step() GradScaler lets run),
// not as (1 - dampening) x gradient; the step after that is an ordinary momentum step.
TEST_F(GpuOps, AmpFirstUpdateIsTheFirstStepThatUpdates) {
  auto scaler = gpu_->make_grad_scaler(LossScaleRule{});
  gpu_->set_amp(AmpMode::Fp16, scaler->scale(), scaler->found_inf());
  const std::size_t np = 1000;
  const auto p = rnd(np, 42), g1 = rnd(np, 43), g2 = rnd(np, 44), buf = rnd(np, 45);
  float* gp = dev(p);
  float* gg = dev(g1);
  float* gb = dev(buf);
  SgdParams s;
  s.lr = 0.1;
  s.momentum = 0.9;
  s.dampening = 0.5;  // makes "first" visible: buf = d, not 0.5 d
  const float one = 1.f, zero = 0.f;
  // Step 0: the host's first step, skipped (inf somewhere).
  gpu_->set_step_scalars({0, 0.1, true});
  gpu_->upload(&one, scaler->found_inf(), sizeof one);
  gpu_->sgd_step(np, gp, gg, gb, s);
  EXPECT_EQ(host(gp, np), p) << "a skipped step moved the parameters";
  // Step 1: not the host's first, but the first update.
  gpu_->set_step_scalars({0, 0.1, false});
  gpu_->upload(&zero, scaler->found_inf(), sizeof zero);
  gpu_->sgd_step(np, gp, gg, gb, s);
  auto p_want = p, b_want = buf;
  cpu::sgd_step(np, p_want.data(), g1.data(), b_want.data(), s, /*first_step=*/true);
  expect_close("momentum after the first update", host(gb, np), b_want, 0, 0);
  expect_close("params after the first update", host(gp, np), p_want, 1e-6, 1e-6);
  // Step 2: an ordinary momentum step.
  gpu_->upload(g2.data(), gg, np * sizeof(float));
  gpu_->sgd_step(np, gp, gg, gb, s);
  cpu::sgd_step(np, p_want.data(), g2.data(), b_want.data(), s, /*first_step=*/false);
  expect_close("momentum after the second update", host(gb, np), b_want, 1e-7, 1e-6);
  expect_close("params after the second update", host(gp, np), p_want, 1e-6, 1e-6);
  gpu_->set_amp(AmpMode::Off, nullptr, nullptr);
}

}  // namespace
}  // namespace mnist_ddp
