// conv2_filter_grad_avx2.cpp — the filter and bias gradient of a convolution on nChw8c input
// (layer2 on the AVX2 path), intrinsics. A unit of work is (two output lane groups, one input
// channel block); per image the unit copies its input block into a zero-bordered [PH][PW][8] buffer
// (so the inner loops have no bounds), then makes one pass over the output pixels per (input lane,
// filter row): 2 x R accumulators, output-gradient vectors times broadcast input values, interior
// pixels two at a time, the zero border's terms skipped. Images go 8 at a time through every
// unit, so they are read from memory once. One thread (dnnl_backend.cpp runs it where a rank
// computes on one).
#include "ops/cpu/conv2_filter_grad_avx2.hpp"

#if defined(__AVX2__) && defined(__FMA__)  // kAvx2Build

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "mnist_ddp/diagnostics/check.hpp"
#include "ops/cpu/conv_taps.hpp"

namespace mnist_ddp::blocked {
namespace {

constexpr int kLanes = 8;  // channels per __m256 and per block

// Where the pieces lie: output planes, the padded input block, blocks per image.
struct ChannelLayout {
  int oh, ow, ph, pw, c_blocks, k_blocks;
  explicit ChannelLayout(const ConvGeom& g)
      : oh(g.out_h()),
        ow(g.out_w()),
        ph(g.h + 2 * g.pad),
        pw(g.w + 2 * g.pad),
        c_blocks(g.c / kLanes),
        k_blocks(g.k / kLanes) {}
};

// One output pixel's terms for NG output lane groups at padded row `row` (input lane cl):
// acc[j][s] += dy[j] * x[ox + s] for the taps s in [lo, hi) (EDGE), else all R; with BIAS,
// acc_b[j] += dy[j]. Inlined, so the accumulators stay in registers.
template <int R, int NG, bool BIAS, bool EDGE>
[[gnu::always_inline]] inline void pixel_terms(const float* row, const float* const* d,
                                               std::size_t at, int ox, int lo, int hi,
                                               __m256 (&acc)[NG][R], __m256 (&acc_b)[NG]) {
  __m256 dv[NG];
  for (int j = 0; j < NG; ++j) {
    dv[j] = _mm256_loadu_ps(d[j] + at);
    if constexpr (BIAS) acc_b[j] = _mm256_add_ps(acc_b[j], dv[j]);
  }
  for (int s = 0; s < R; ++s) {
    if (EDGE && (s < lo || s >= hi)) continue;
    const __m256 xv = _mm256_broadcast_ss(row + static_cast<std::size_t>(ox + s) * kLanes);
    for (int j = 0; j < NG; ++j) acc[j][s] = _mm256_fmadd_ps(dv[j], xv, acc[j][s]);
  }
}

// Two output pixels ox, ox + 1 of the interior (every tap inside the image): the input value at
// ox + t serves pixel ox at tap t and pixel ox + 1 at tap t - 1, so R + 1 broadcasts and 2 x NG
// output-gradient loads feed 2 x NG x R multiply-adds (at NG = 2, R = 5: 10 loads for 20, where
// a pixel at a time takes 7 for 10); 15 of AVX2's 16 registers.
template <int R, int NG>
[[gnu::always_inline]] inline void pixel_pair_terms(const float* row, const float* const* d,
                                                    std::size_t at, int ox, __m256 (&acc)[NG][R]) {
  __m256 dv0[NG], dv1[NG];
  for (int j = 0; j < NG; ++j) {
    dv0[j] = _mm256_loadu_ps(d[j] + at);
    dv1[j] = _mm256_loadu_ps(d[j] + at + kLanes);
  }
  for (int t = 0; t <= R; ++t) {
    const __m256 xv = _mm256_broadcast_ss(row + static_cast<std::size_t>(ox + t) * kLanes);
    for (int j = 0; j < NG; ++j) {
      if (t < R) acc[j][t] = _mm256_fmadd_ps(dv0[j], xv, acc[j][t]);
      if (t > 0) acc[j][t - 1] = _mm256_fmadd_ps(dv1[j], xv, acc[j][t - 1]);
    }
  }
}

// One image's pass for input lane cl and filter row r: NG output lane groups x R taps of float
// sums (with NG = 2 and R = 5: 10 independent FMA chains in 13 of AVX2's 16 registers; the bias
// pass adds NG more), added to taps[j][cl][r][s][lane] and, with BIAS, the plain sum of dy to
// bias[j][lane]. padded: the input block [PH][PW][8]; d[j]: group j's output gradient [OH][OW][8].
// Terms on the zero border are skipped: the rows whole, and at the edge columns the taps outside
// the image (at the model's 14x14, pad 2, R 5: 16% of the multiply-adds). The bias pass visits
// every pixel, all taps.
template <int R, int NG, bool BIAS>
void lane_row(const ConvGeom& g, const ChannelLayout& l, const float* padded, const float* const* d,
              int cl, int r, float* const* taps, float* const* bias) {
  __m256 acc[NG][R], acc_b[NG];
  for (int j = 0; j < NG; ++j) {
    acc_b[j] = _mm256_setzero_ps();
    for (int s = 0; s < R; ++s) acc[j][s] = _mm256_setzero_ps();
  }
  // Output pixel (oy, ox) meets the image at filter row r when p <= oy + r < p + H, and at tap
  // s when p <= ox + s < p + W: every tap in the columns [left, right).
  const int oy0 = BIAS ? 0 : std::max(0, g.pad - r);
  const int oy1 = BIAS ? l.oh : std::min(l.oh, g.pad + g.h - r);
  const int left = BIAS ? 0 : std::min(l.ow, g.pad);
  const int right = BIAS ? l.ow : std::clamp(g.w + g.pad - R + 1, left, l.ow);
  for (int oy = oy0; oy < oy1; ++oy) {
    const float* row = padded + static_cast<std::size_t>(oy + r) * l.pw * kLanes + cl;
    const std::size_t line = static_cast<std::size_t>(oy) * l.ow * kLanes;
    const auto edge = [&](int ox) {
      pixel_terms<R, NG, BIAS, true>(row, d, line + static_cast<std::size_t>(ox) * kLanes, ox,
                                     std::max(0, g.pad - ox), std::min(R, g.w + g.pad - ox), acc,
                                     acc_b);
    };
    for (int ox = 0; ox < left; ++ox) edge(ox);
    int ox = left;
    if constexpr (!BIAS) {
      for (; ox + 2 <= right; ox += 2)
        pixel_pair_terms<R, NG>(row, d, line + static_cast<std::size_t>(ox) * kLanes, ox, acc);
    }
    for (; ox < right; ++ox) {
      pixel_terms<R, NG, BIAS, false>(row, d, line + static_cast<std::size_t>(ox) * kLanes, ox, 0,
                                      R, acc, acc_b);
    }
    for (ox = right; ox < l.ow; ++ox) edge(ox);
  }
  for (int j = 0; j < NG; ++j) {
    for (int s = 0; s < R; ++s) {
      float* t = taps[j] + ((cl * R + r) * R + s) * kLanes;
      _mm256_storeu_ps(t, _mm256_add_ps(_mm256_loadu_ps(t), acc[j][s]));
    }
    if constexpr (BIAS) {
      _mm256_storeu_ps(bias[j], _mm256_add_ps(_mm256_loadu_ps(bias[j]), acc_b[j]));
    }
  }
}

// One unit over images [n0, n1): NG output lane groups from k-block kb, input block cb. The bias
// sums come with cb 0's first pass only. taps: [NG][8 lanes of c][R][R][8]; bias: [NG][8];
// padded: [PH][PW][8] with a zero border (never written, so it stays zero across images).
template <int R, int NG>
void unit_grad(const ConvGeom& g, const ChannelLayout& l, const float* x, const float* dy, int kb,
               int cb, int n0, int n1, float* padded, float* taps, float* bias) {
  const std::size_t in_plane = static_cast<std::size_t>(g.h) * g.w * kLanes;
  const std::size_t out_plane = static_cast<std::size_t>(l.oh) * l.ow * kLanes;
  float* t[NG];
  float* b[NG];
  for (int j = 0; j < NG; ++j) {
    t[j] = taps + static_cast<std::size_t>(j) * kLanes * R * R * kLanes;
    b[j] = bias + j * kLanes;
  }
  for (int n = n0; n < n1; ++n) {
    const float* block = x + (static_cast<std::size_t>(n) * l.c_blocks + cb) * in_plane;
    for (int y = 0; y < g.h; ++y) {
      std::copy_n(block + static_cast<std::size_t>(y) * g.w * kLanes, g.w * kLanes,
                  padded + (static_cast<std::size_t>(y + g.pad) * l.pw + g.pad) * kLanes);
    }
    const float* d[NG];
    for (int j = 0; j < NG; ++j)
      d[j] = dy + (static_cast<std::size_t>(n) * l.k_blocks + kb + j) * out_plane;
    for (int cl = 0; cl < kLanes; ++cl) {
      for (int r = 0; r < R; ++r) {
        if (cb == 0 && cl == 0 && r == 0) {
          lane_row<R, NG, true>(g, l, padded, d, cl, r, t, b);
        } else {
          lane_row<R, NG, false>(g, l, padded, d, cl, r, t, b);
        }
      }
    }
  }
}

template <int R>
void filter_grad(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db) {
  const ChannelLayout l(g);
  // A unit: two output lane groups (an odd last one alone) and one input block.
  const int pairs = (l.k_blocks + 1) / 2, units = pairs * l.c_blocks;
  const std::size_t unit_taps = static_cast<std::size_t>(2) * kLanes * R * R * kLanes;
  std::vector<float> taps(units * unit_taps, 0.f), bias(units * 2 * kLanes, 0.f);
  std::vector<float> padded(static_cast<std::size_t>(l.ph) * l.pw * kLanes, 0.f);
  // Images a chunk at a time, every unit over the chunk before the next: the chunk's input and
  // output gradient (8 images: 300 KB at layer2) are read from memory once and stay in L2 while
  // the units pass over them. Unit after unit over all images instead read the input and the
  // output gradient twice each from beyond L2: 4.77 against 4.66 ms at batch 100 on an idle Zen 5
  // core, 6.51 against 6.14 on one whose neighbour was busy.
  constexpr int kChunk = 8;
  for (int n0 = 0; n0 < g.n; n0 += kChunk) {
    const int n1 = std::min(g.n, n0 + kChunk);
    for (int u = 0; u < units; ++u) {
      const int kb = (u / l.c_blocks) * 2, cb = u % l.c_blocks;
      float* t = taps.data() + u * unit_taps;
      float* b = bias.data() + u * 2 * kLanes;
      if (l.k_blocks - kb >= 2) {
        unit_grad<R, 2>(g, l, x, dy, kb, cb, n0, n1, padded.data(), t, b);
      } else {
        unit_grad<R, 1>(g, l, x, dy, kb, cb, n0, n1, padded.data(), t, b);
      }
    }
  }
  // dw[k][c][r][s]: unit ((k / 8) / 2, c / 8)'s taps[(k / 8) % 2][c % 8][r][s][k % 8].
  for (int k = 0; k < g.k; ++k) {
    const int kg = k / kLanes, j = kg % 2, lane = k % kLanes;
    for (int c = 0; c < g.c; ++c) {
      const int u = (kg / 2) * l.c_blocks + c / kLanes;
      const float* t = taps.data() + u * unit_taps +
                       (static_cast<std::size_t>(j) * kLanes + c % kLanes) * R * R * kLanes;
      for (int rs = 0; rs < R * R; ++rs)
        dw[(static_cast<std::size_t>(k) * g.c + c) * R * R + rs] = t[rs * kLanes + lane];
    }
    db[k] = bias[(kg / 2) * l.c_blocks * 2 * kLanes + j * kLanes + lane];
  }
}

}  // namespace

void channel_filter_grad(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db) {
  MNIST_DDP_CHECK(g.c % kLanes == 0 && g.c > 0 && g.k % kLanes == 0 && g.k > 0,
                  "channel convolution: input and output channels multiples of 8");
  MNIST_DDP_CHECK(g.r >= 1 && g.r <= kMaxTaps, "channel convolution: filter width 1..7");
  MNIST_DDP_CHECK(g.pad >= 0 && g.r <= g.h + 2 * g.pad && g.r <= g.w + 2 * g.pad,
                  "channel convolution: the filter must lie within the padded image");
  with_taps(g.r, [&]<int R>() { filter_grad<R>(g, x, dy, dw, db); });
}

}  // namespace mnist_ddp::blocked

#endif  // __AVX2__ && __FMA__
