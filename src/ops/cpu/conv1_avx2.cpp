// conv1_avx2.cpp — layer1's convolution on the AVX2 path, intrinsics: 8 output channels a vector
// (one lane group of a pixel), two lane groups a pass, the image zero-padded once per image so the
// inner loops have no bounds; every loop fits AVX2's 16 vector registers (the x86-64-v3 build has
// no more; built for AVX-512 the compiler has 32).
// Forward: y = b + sum over the taps (r-major), five output pixels of two lane groups a tile held
// in registers. Filter gradient:
// one filter row a pass with 2 x R accumulators (the bias on the first pass), each image's float
// sums added to double totals.
#include "ops/cpu/conv1_avx2.hpp"

#if defined(__AVX2__) && defined(__FMA__)  // kAvx2Build

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "mnist_ddp/diagnostics/check.hpp"
#include "ops/cpu/conv_taps.hpp"

namespace mnist_ddp::blocked {
namespace {

constexpr int kLanes = 8;  // output channels per __m256

// Adds the 8 float lanes of v to t[0..7] in double.
void add_to(double* t, __m256 v) {
  _mm256_storeu_pd(t,
                   _mm256_add_pd(_mm256_loadu_pd(t), _mm256_cvtps_pd(_mm256_castps256_ps128(v))));
  _mm256_storeu_pd(
      t + 4, _mm256_add_pd(_mm256_loadu_pd(t + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
}

// One image's contribution to filter row r of NG 8-channel lane groups (NG x R accumulators:
// with NG = 2, ten independent FMA chains at R = 5), added to taps[j][r][s][lane] (and, with
// BIAS, the plain sum of dy to bias[j][lane]). padded: the image with `pad` zeros around, pw wide;
// d[j]: group j's first output gradient, stride b per pixel. Each image value is broadcast once
// per pixel and serves both groups: 13 registers at R = 5, 15 on the bias pass (R = 6, 7 spill a
// little; the model's is 5). (Sliding the R broadcasts through registers needs R more of them:
// past AVX2's 16, so the x86-64-v3 build spilled: 0.79 ms against 0.61 ms built with AVX-512's
// 32 registers.)
template <int R, int NG, bool BIAS>
void image_row(int oh, int ow, int pw, int b, const float* padded, const float* const* d, int r,
               double* const* taps, double* const* bias) {
  __m256 acc[NG][R], acc_b[NG];
  for (int j = 0; j < NG; ++j) {
    acc_b[j] = _mm256_setzero_ps();
    for (int s = 0; s < R; ++s) acc[j][s] = _mm256_setzero_ps();
  }
  for (int oy = 0; oy < oh; ++oy) {
    const float* row = padded + static_cast<std::size_t>(oy + r) * pw;
    const std::size_t line = static_cast<std::size_t>(oy) * ow * b;
    for (int ox = 0; ox < ow; ++ox) {
      __m256 dv[NG];
      for (int j = 0; j < NG; ++j) {
        dv[j] = _mm256_loadu_ps(d[j] + line + static_cast<std::size_t>(ox) * b);
        if constexpr (BIAS) acc_b[j] = _mm256_add_ps(acc_b[j], dv[j]);
      }
      for (int s = 0; s < R; ++s) {
        const __m256 xv = _mm256_broadcast_ss(row + ox + s);
        for (int j = 0; j < NG; ++j) acc[j][s] = _mm256_fmadd_ps(dv[j], xv, acc[j][s]);
      }
    }
  }
  for (int j = 0; j < NG; ++j) {
    for (int s = 0; s < R; ++s) add_to(taps[j] + (r * R + s) * kLanes, acc[j][s]);
    if constexpr (BIAS) add_to(bias[j], acc_b[j]);
  }
}

// Filter rows 0..R-1 of NG lane groups for one image.
template <int R, int NG>
void image_rows(int oh, int ow, int pw, int b, const float* padded, const float* const* d,
                double* const* taps, double* const* bias) {
  image_row<R, NG, true>(oh, ow, pw, b, padded, d, 0, taps, bias);
  for (int r = 1; r < R; ++r) image_row<R, NG, false>(oh, ow, pw, b, padded, d, r, taps, bias);
}

// Where the pieces of an image convolution lie: output planes, lane groups, the padded image.
struct ImageLayout {
  int oh, ow, ph, pw, block, cb_count, groups, lane_groups;
  ImageLayout(int b, const ConvGeom& g)
      : oh(g.out_h()),
        ow(g.out_w()),
        ph(g.h + 2 * g.pad),
        pw(g.w + 2 * g.pad),
        block(b),
        cb_count(g.k / b),
        groups(b / kLanes),
        lane_groups(g.k / kLanes) {}
  // Image n's output (gradient) at lane group lg: channels lg*8 .. lg*8+7, in block lg / groups at
  // lanes (lg % groups) * 8 of each pixel.
  std::size_t group_offset(int n, int lg) const {
    return (static_cast<std::size_t>(n) * cb_count + lg / groups) * oh * ow * block +
           static_cast<std::size_t>(lg % groups) * kLanes;
  }
};

// Image n inside the zero border of `padded` (ph x pw; the border is never written, so it stays
// zero across images).
void pad_image(const ConvGeom& g, const ImageLayout& l, const float* x, int n, float* padded) {
  for (int y = 0; y < g.h; ++y) {
    std::copy_n(x + (static_cast<std::size_t>(n) * g.h + y) * g.w, g.w,
                padded + static_cast<std::size_t>(y + g.pad) * l.pw + g.pad);
  }
}

void check_image_conv(int block, const ConvGeom& g) {
  MNIST_DDP_CHECK(block == 8 || block == 16, "channel block must be 8 or 16");
  MNIST_DDP_CHECK(g.c == 1 && g.k % block == 0, "image convolution: 1 input channel, K % B");
  MNIST_DDP_CHECK(g.r >= 1 && g.r <= kMaxTaps, "image convolution: filter width 1..7");
  MNIST_DDP_CHECK(g.pad >= 0 && g.r <= g.h + 2 * g.pad && g.r <= g.w + 2 * g.pad,
                  "image convolution: the filter must lie within the padded image");
}

// One image's output for NG lane groups, T output pixels of a row at a time: NG x T accumulators
// start at the bias, take every tap (r, s) as acc[j][t] += wt[j][r][s] * padded[oy + r][ox + t + s]
// (one weight vector per group and one broadcast image value per pixel and tap), and are stored
// once. With NG = 2 and T = 5: 10 independent FMA chains, 25 deep at R = 5, in 13 of AVX2's 16
// registers (T = 6 needs 15 and the x86-64-v3 build spilled: 1.03 ms at batch 100; T = 4 left the
// FMA units waiting on the chains).
template <int R, int NG, int T>
void forward_tile(const ImageLayout& l, const float* padded, const float* const* wt,
                  const __m256* bias, float* const* y, int oy, int ox) {
  __m256 acc[NG][T];
  for (int j = 0; j < NG; ++j)
    for (int t = 0; t < T; ++t) acc[j][t] = bias[j];
  for (int r = 0; r < R; ++r) {
    const float* row = padded + static_cast<std::size_t>(oy + r) * l.pw + ox;
    for (int s = 0; s < R; ++s) {
      __m256 wv[NG];
      for (int j = 0; j < NG; ++j) wv[j] = _mm256_loadu_ps(wt[j] + (r * R + s) * kLanes);
      for (int t = 0; t < T; ++t) {
        const __m256 xv = _mm256_broadcast_ss(row + t + s);
        for (int j = 0; j < NG; ++j) acc[j][t] = _mm256_fmadd_ps(wv[j], xv, acc[j][t]);
      }
    }
  }
  const std::size_t at = (static_cast<std::size_t>(oy) * l.ow + ox) * l.block;
  for (int j = 0; j < NG; ++j)
    for (int t = 0; t < T; ++t)
      _mm256_storeu_ps(y[j] + at + static_cast<std::size_t>(t) * l.block, acc[j][t]);
}

template <int R, int NG>
void forward_rows(const ImageLayout& l, const float* padded, const float* const* wt,
                  const float* const* bias, float* const* y) {
  constexpr int kTile = 5;
  __m256 bv[NG];
  for (int j = 0; j < NG; ++j) bv[j] = _mm256_loadu_ps(bias[j]);
  for (int oy = 0; oy < l.oh; ++oy) {
    int ox = 0;
    for (; ox + kTile <= l.ow; ox += kTile)
      forward_tile<R, NG, kTile>(l, padded, wt, bv, y, oy, ox);
    for (; ox + 2 <= l.ow; ox += 2) forward_tile<R, NG, 2>(l, padded, wt, bv, y, oy, ox);
    for (; ox < l.ow; ++ox) forward_tile<R, NG, 1>(l, padded, wt, bv, y, oy, ox);
  }
}

template <int R>
void conv_forward(int block, const ConvGeom& g, const float* x, const float* w, const float* b,
                  float* y) {
  const ImageLayout l(block, g);
  // The weights per lane group, tap-major: wt[lg][r][s][lane] = w[lg*8 + lane][0][r][s].
  std::vector<float> wt(static_cast<std::size_t>(g.k) * R * R);
  for (int k = 0; k < g.k; ++k)
    for (int rs = 0; rs < R * R; ++rs)
      wt[(static_cast<std::size_t>(k / kLanes) * R * R + rs) * kLanes + k % kLanes] =
          w[static_cast<std::size_t>(k) * R * R + rs];
  const auto group_wt = [&](int lg) {
    return wt.data() + static_cast<std::size_t>(lg) * R * R * kLanes;
  };
  std::vector<float> padded(static_cast<std::size_t>(l.ph) * l.pw, 0.f);
  for (int n = 0; n < g.n; ++n) {
    pad_image(g, l, x, n, padded.data());
    // Lane groups two at a time, an odd last one alone. Written out, not folded into a generic
    // lambda over NG: that version measured 0.95 ms against 0.70-0.75 (x86-64-v3 build).
    int lg = 0;
    for (; lg + 1 < l.lane_groups; lg += 2) {
      const float* wts[2] = {group_wt(lg), group_wt(lg + 1)};
      const float* bs[2] = {b + lg * kLanes, b + (lg + 1) * kLanes};
      float* ys[2] = {y + l.group_offset(n, lg), y + l.group_offset(n, lg + 1)};
      forward_rows<R, 2>(l, padded.data(), wts, bs, ys);
    }
    if (lg < l.lane_groups) {
      const float* wts[1] = {group_wt(lg)};
      const float* bs[1] = {b + lg * kLanes};
      float* ys[1] = {y + l.group_offset(n, lg)};
      forward_rows<R, 1>(l, padded.data(), wts, bs, ys);
    }
  }
}

template <int R>
void filter_grad(int block, const ConvGeom& g, const float* x, const float* dy, float* dw,
                 float* db) {
  const ImageLayout l(block, g);
  // Double totals per lane group: taps [R][R][8], bias [8].
  std::vector<double> taps(static_cast<std::size_t>(l.lane_groups) * R * R * kLanes, 0.0);
  std::vector<double> bias(static_cast<std::size_t>(g.k), 0.0);
  std::vector<float> padded(static_cast<std::size_t>(l.ph) * l.pw, 0.f);
  const auto group_taps = [&](int lg) {
    return taps.data() + static_cast<std::size_t>(lg) * R * R * kLanes;
  };
  for (int n = 0; n < g.n; ++n) {
    pad_image(g, l, x, n, padded.data());
    int lg = 0;
    for (; lg + 1 < l.lane_groups; lg += 2) {
      const float* d[2] = {dy + l.group_offset(n, lg), dy + l.group_offset(n, lg + 1)};
      double* t[2] = {group_taps(lg), group_taps(lg + 1)};
      double* bs[2] = {bias.data() + lg * kLanes, bias.data() + (lg + 1) * kLanes};
      image_rows<R, 2>(l.oh, l.ow, l.pw, block, padded.data(), d, t, bs);
    }
    if (lg < l.lane_groups) {
      const float* d[1] = {dy + l.group_offset(n, lg)};
      double* t[1] = {group_taps(lg)};
      double* bs[1] = {bias.data() + lg * kLanes};
      image_rows<R, 1>(l.oh, l.ow, l.pw, block, padded.data(), d, t, bs);
    }
  }
  for (int k = 0; k < g.k; ++k) {
    const double* t = group_taps(k / kLanes);
    for (int rs = 0; rs < R * R; ++rs) {
      dw[static_cast<std::size_t>(k) * R * R + rs] =
          static_cast<float>(t[rs * kLanes + k % kLanes]);
    }
    db[k] = static_cast<float>(bias[k]);
  }
}

}  // namespace

void image_conv_forward(int block, const ConvGeom& g, const float* x, const float* w,
                        const float* b, float* y) {
  check_image_conv(block, g);
  with_taps(g.r, [&]<int R>() { conv_forward<R>(block, g, x, w, b, y); });
}

void image_filter_grad(int block, const ConvGeom& g, const float* x, const float* dy, float* dw,
                       float* db) {
  check_image_conv(block, g);
  with_taps(g.r, [&]<int R>() { filter_grad<R>(block, g, x, dy, dw, db); });
}

}  // namespace mnist_ddp::blocked

#endif  // __AVX2__ && __FMA__
