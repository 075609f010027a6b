// image_filter_grad.cpp — layer1's filter and bias gradients on the blocked output gradient, AVX2
// intrinsics: 8 output channels a vector (one lane group of a pixel), the image zero-padded once
// per image so the inner loop has no bounds, one filter row of two lane groups a pass (2 x R
// accumulators, the image values of the R taps sliding through registers; the bias on the first
// pass), each image's float sums added to double totals.
#include "ops/cpu/image_filter_grad.hpp"

#if defined(__AVX2__) && defined(__FMA__)  // kAvx2Build

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "mnist_ddp/runtime/check.hpp"

namespace mnist_ddp::blocked {
namespace {

constexpr int kLanes = 8;    // output channels per __m256
constexpr int kMaxTaps = 7;  // filter widths up to 7 (the model's is 5)

// Adds the 8 float lanes of v to t[0..7] in double.
void add_to(double* t, __m256 v) {
  _mm256_storeu_pd(t,
                   _mm256_add_pd(_mm256_loadu_pd(t), _mm256_cvtps_pd(_mm256_castps256_ps128(v))));
  _mm256_storeu_pd(
      t + 4, _mm256_add_pd(_mm256_loadu_pd(t + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
}

// One image's contribution to filter row r of NG 8-channel lane groups (NG chains of R fused
// multiply-adds: with NG = 2 enough independent adds in flight), added to taps[j][r][s][lane]
// (and, with BIAS, the plain sum of dy to bias[j][lane]). padded: the image with `pad` zeros
// around, pw wide; d[j]: group j's first output gradient, stride b per pixel. Along a row the R
// taps' image values slide by one pixel per output pixel: R broadcasts stay in registers and one
// new one is loaded per pixel, so the loop is bound by its fused multiply-adds, not by loads.
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
    __m256 bc[R];  // bc[s] = row[ox + s], broadcast
    for (int s = 0; s + 1 < R; ++s) bc[s] = _mm256_broadcast_ss(row + s);
    for (int ox = 0; ox < ow; ++ox) {
      bc[R - 1] = _mm256_broadcast_ss(row + ox + R - 1);
      for (int j = 0; j < NG; ++j) {
        const __m256 dv = _mm256_loadu_ps(d[j] + line + static_cast<std::size_t>(ox) * b);
        if constexpr (BIAS) acc_b[j] = _mm256_add_ps(acc_b[j], dv);
        for (int s = 0; s < R; ++s) acc[j][s] = _mm256_fmadd_ps(dv, bc[s], acc[j][s]);
      }
      for (int s = 0; s + 1 < R; ++s) bc[s] = bc[s + 1];
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

template <int R>
void filter_grad(int block, const cpu::ConvGeom& g, const float* x, const float* dy, float* dw,
                 float* db) {
  const int oh = g.out_h(), ow = g.out_w(), ph = g.h + 2 * g.pad, pw = g.w + 2 * g.pad;
  const int cb_count = g.k / block, groups = block / kLanes;
  // Double totals per lane group: taps [R][R][8], bias [8].
  std::vector<double> taps(static_cast<std::size_t>(g.k / kLanes) * R * R * kLanes, 0.0);
  std::vector<double> bias(static_cast<std::size_t>(g.k), 0.0);
  std::vector<float> padded(static_cast<std::size_t>(ph) * pw, 0.f);
  for (int n = 0; n < g.n; ++n) {
    // The image inside its zero border (the border stays zero across images).
    for (int y = 0; y < g.h; ++y) {
      std::copy_n(x + (static_cast<std::size_t>(n) * g.h + y) * g.w, g.w,
                  padded.data() + static_cast<std::size_t>(y + g.pad) * pw + g.pad);
    }
    // Lane group lg: channels lg*8 .. lg*8+7, in block lg / groups at lanes (lg % groups) * 8.
    const auto group_dy = [&](int lg) {
      const int cb = lg / groups, grp = lg % groups;
      return dy + (static_cast<std::size_t>(n) * cb_count + cb) * oh * ow * block + grp * kLanes;
    };
    const auto group_taps = [&](int lg) {
      return taps.data() + static_cast<std::size_t>(lg) * R * R * kLanes;
    };
    const int lane_groups = g.k / kLanes;
    int lg = 0;
    for (; lg + 1 < lane_groups; lg += 2) {
      const float* d[2] = {group_dy(lg), group_dy(lg + 1)};
      double* t[2] = {group_taps(lg), group_taps(lg + 1)};
      double* bs[2] = {bias.data() + lg * kLanes, bias.data() + (lg + 1) * kLanes};
      image_rows<R, 2>(oh, ow, pw, block, padded.data(), d, t, bs);
    }
    if (lg < lane_groups) {
      const float* d[1] = {group_dy(lg)};
      double* t[1] = {group_taps(lg)};
      double* bs[1] = {bias.data() + lg * kLanes};
      image_rows<R, 1>(oh, ow, pw, block, padded.data(), d, t, bs);
    }
  }
  for (int k = 0; k < g.k; ++k) {
    const double* t = taps.data() + static_cast<std::size_t>(k / kLanes) * R * R * kLanes;
    for (int rs = 0; rs < R * R; ++rs) {
      dw[static_cast<std::size_t>(k) * R * R + rs] =
          static_cast<float>(t[rs * kLanes + k % kLanes]);
    }
    db[k] = static_cast<float>(bias[k]);
  }
}

}  // namespace

void image_filter_grad(int block, const cpu::ConvGeom& g, const float* x, const float* dy,
                       float* dw, float* db) {
  MNIST_DDP_CHECK(block == 8 || block == 16, "channel block must be 8 or 16");
  MNIST_DDP_CHECK(g.c == 1 && g.k % block == 0, "image filter gradient: 1 input channel, K % B");
  MNIST_DDP_CHECK(g.r >= 1 && g.r <= kMaxTaps, "image filter gradient: filter width 1..7");
  MNIST_DDP_CHECK(g.pad >= 0 && g.r <= g.h + 2 * g.pad && g.r <= g.w + 2 * g.pad,
                  "image filter gradient: the filter must lie within the padded image");
  switch (g.r) {
    case 1:
      return filter_grad<1>(block, g, x, dy, dw, db);
    case 2:
      return filter_grad<2>(block, g, x, dy, dw, db);
    case 3:
      return filter_grad<3>(block, g, x, dy, dw, db);
    case 4:
      return filter_grad<4>(block, g, x, dy, dw, db);
    case 5:
      return filter_grad<5>(block, g, x, dy, dw, db);
    case 6:
      return filter_grad<6>(block, g, x, dy, dw, db);
    default:
      return filter_grad<7>(block, g, x, dy, dw, db);
  }
}

}  // namespace mnist_ddp::blocked

#endif  // __AVX2__ && __FMA__
