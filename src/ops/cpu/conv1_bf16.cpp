// conv1_bf16.cpp — layer1's convolution under --amp bf16 on AVX512-BF16 (conv1_bf16.hpp). Each
// image is rounded to bf16 once into a zero-padded copy one column wider than the padding needs,
// so that a 32-bit load at any column reads the pair (column, column + 1) with no bounds checks.
// Forward: a tap pair is two filter columns of one filter row, (s, s + 1), their weights one
// vector of 16 channels x 2 (the odd filter's last pair has a zero weight); 14 output pixels of a
// row a tile, R x ceil(R / 2) weight vectors (15 at R = 5) and 14 accumulators held in 29 of the
// 32 registers.
// Filter gradient: a pair is two neighbouring output pixels (ox, ox + 1), whose output gradients
// (16 channels each, adjacent in memory) one permute interleaves; every tap's accumulator (R x R
// of them, 25 at R = 5) and the bias's stay in registers for the whole image.
#include "ops/cpu/conv1_bf16.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

// The kernels exist where the build targets AVX512-BF16 (with BW and VL, which every such CPU has).
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#endif

#include "mnist_ddp/base/half.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "ops/cpu/conv_taps.hpp"

namespace mnist_ddp::bf16 {

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
namespace {

constexpr int kLanes = 16;  // output channels per vector (one block of the activations)
// Filter widths up to 5 (of blocked::kMaxTaps' 7): R x R accumulators fit the registers.
constexpr int kMaxWidth = 5;
constexpr int kTile = 14;  // forward: output pixels per tile

// The image rounded to bf16 inside a zero border: ph x pw with pw = W + 2 pad + 1, the extra
// column the second half of a pair at the last column reads (multiplied by a zero weight or a
// zero gradient).
struct Padded {
  int ph, pw;
  std::vector<std::uint16_t> v;
  explicit Padded(const ConvGeom& g)
      : ph(g.h + 2 * g.pad), pw(g.w + 2 * g.pad + 1), v(static_cast<std::size_t>(ph) * pw, 0) {}
  // Image n inside the border (the border is never written, so it stays zero across images),
  // rounded by vcvtneps2bf16: to_bf16's rounding, except that an fp32 subnormal reads as zero (as
  // in oneDNN's conversions, and vdpbf16ps reads bf16 subnormals as zero anyway).
  void load(const ConvGeom& g, const float* x, int n) {
    for (int y = 0; y < g.h; ++y) {
      const float* from = x + (static_cast<std::size_t>(n) * g.h + y) * g.w;
      std::uint16_t* to = v.data() + static_cast<std::size_t>(y + g.pad) * pw + g.pad;
      for (int i = 0; i < g.w; i += 16) {
        const __mmask16 m = g.w - i >= 16 ? 0xffff : (1u << (g.w - i)) - 1;
        const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, from + i));
        _mm256_mask_storeu_epi16(to + i, m, reinterpret_cast<__m256i>(h));
      }
    }
  }
};

__m512 dot(__m512 acc, __m512bh a, __m512bh b) {
  return _mm512_dpbf16_ps(acc, a, b);
}

// acc + a's pairs times the pair (p[0], p[1]) in every lane, as one instruction: vdpbf16ps with
// the pair an embedded broadcast of its memory operand. Why asm: from intrinsics GCC 12 makes a
// broadcast load of its own for each pair and keeps equal addresses' broadcasts in registers,
// past the 32 the tiles leave (at batch 100 on Zen 5, the forward spilled: 0.25 ms against 0.225;
// the filter gradient 0.27 against 0.18).
__m512 dot_pair_at(__m512 acc, __m512bh a, const std::uint16_t* p) {
  __asm__("vdpbf16ps %[x]%{1to16%}, %[a], %[acc]"
          : [acc] "+v"(acc)
          : [a] "v"(a), [x] "m"(*reinterpret_cast<const std::uint16_t(*)[2]>(p)));
  return acc;
}

// Adds the 16 float lanes of v to t[0..15] in double (once per image and accumulator).
void add_to(double* t, __m512 v) {
  alignas(64) float f[kLanes];
  _mm512_store_ps(f, v);
  for (int i = 0; i < kLanes; ++i) t[i] += f[i];
}

// T output pixels of row oy from column ox, one block of 16 channels: acc[t] starts at the bias
// and takes each tap pair (r, 2j) as acc[t] += w[r][2j] x[oy + r][ox + t + 2j] + w[r][2j + 1]
// x[oy + r][ox + t + 2j + 1]; stored once. y: the block's output plane.
template <int R, int T>
void forward_tile(const Padded& p, const __m512bh* wv, __m512 bias, float* y, int ow, int oy,
                  int ox) {
  constexpr int J = (R + 1) / 2;
  __m512 acc[T];
#pragma GCC unroll 32
  for (int t = 0; t < T; ++t) acc[t] = bias;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const std::uint16_t* row = p.v.data() + static_cast<std::size_t>(oy + r) * p.pw + ox;
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j)
#pragma GCC unroll 32
      for (int t = 0; t < T; ++t) acc[t] = dot_pair_at(acc[t], wv[r * J + j], row + t + 2 * j);
  }
  float* at = y + (static_cast<std::size_t>(oy) * ow + ox) * kLanes;
#pragma GCC unroll 32
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(at + static_cast<std::size_t>(t) * kLanes, acc[t]);
}

template <int R>
void forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y) {
  constexpr int J = (R + 1) / 2;
  const int oh = g.out_h(), ow = g.out_w(), blocks = g.k / kLanes;
  const std::size_t plane = static_cast<std::size_t>(oh) * ow * kLanes;
  // The weights as tap pairs per block: pairs[kb][r][j][lane] = (w[k][r][2j], w[k][r][2j + 1] or
  // 0) for k = kb * 16 + lane, low half first (the order of the image's pair).
  std::vector<std::uint32_t> pairs(static_cast<std::size_t>(blocks) * R * J * kLanes);
  for (int k = 0; k < g.k; ++k) {
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < J; ++j) {
        const float* wr = w + (static_cast<std::size_t>(k) * R + r) * R;
        const std::uint32_t lo = to_bf16(wr[2 * j]),
                            hi = 2 * j + 1 < R ? to_bf16(wr[2 * j + 1]) : 0u;
        pairs[((static_cast<std::size_t>(k / kLanes) * R + r) * J + j) * kLanes + k % kLanes] =
            lo | hi << 16;
      }
    }
  }
  Padded p(g);
  for (int n = 0; n < g.n; ++n) {
    p.load(g, x, n);
    for (int kb = 0; kb < blocks; ++kb) {
      __m512bh wv[R * J];
#pragma GCC unroll 32
      for (int i = 0; i < R * J; ++i) {
        wv[i] = reinterpret_cast<__m512bh>(
            _mm512_loadu_si512(pairs.data() + (static_cast<std::size_t>(kb) * R * J + i) * kLanes));
      }
      const __m512 bias = _mm512_loadu_ps(b + kb * kLanes);
      float* yb = y + (static_cast<std::size_t>(n) * blocks + kb) * plane;
      for (int oy = 0; oy < oh; ++oy) {
        int ox = 0;
        for (; ox + kTile <= ow; ox += kTile) forward_tile<R, kTile>(p, wv, bias, yb, ow, oy, ox);
        for (; ox + 4 <= ow; ox += 4) forward_tile<R, 4>(p, wv, bias, yb, ow, oy, ox);
        for (; ox < ow; ++ox) forward_tile<R, 1>(p, wv, bias, yb, ow, oy, ox);
      }
    }
  }
}

// One image's sums for one block: acc[r][s] += the pixel pair's (dy[ox], dy[ox + 1]) times
// (x[oy + r][ox + s], x[oy + r][ox + s + 1]); the bias's as the pair times (1, 1). d: the
// block's output-gradient plane [OH][OW][16]; an odd OW's last pixel pairs with a zero gradient.
// Added to taps[r][s][lane] and bias[lane] in double.
template <int R>
void filter_image(const Padded& p, const std::uint16_t* d, int oh, int ow, double* taps,
                  double* bias) {
  // Interleaves pixel ox's 16 channels (elements 0..15) with pixel ox + 1's (16..31): lane l gets
  // the pair (dy[ox][l], dy[ox + 1][l]).
  alignas(64) static constexpr std::uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i order = _mm512_load_si512(kInterleave);
  const __m512bh ones = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3f803f80));  // (1, 1)
  __m512 acc[R * R];
#pragma GCC unroll 32
  for (int i = 0; i < R * R; ++i) acc[i] = _mm512_setzero_ps();
  __m512 acc_b = _mm512_setzero_ps();
  const auto pixel_pair = [&](int oy, int ox, __m512i dy) {
    const __m512bh dv = reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(order, dy));
    acc_b = dot(acc_b, dv, ones);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const std::uint16_t* row = p.v.data() + static_cast<std::size_t>(oy + r) * p.pw + ox;
#pragma GCC unroll 8
      for (int s = 0; s < R; ++s) acc[r * R + s] = dot_pair_at(acc[r * R + s], dv, row + s);
    }
  };
  for (int oy = 0; oy < oh; ++oy) {
    const std::uint16_t* line = d + static_cast<std::size_t>(oy) * ow * kLanes;
    int ox = 0;
    for (; ox + 2 <= ow; ox += 2)
      pixel_pair(oy, ox, _mm512_loadu_si512(line + static_cast<std::size_t>(ox) * kLanes));
    if (ox < ow) {  // the last pixel alone: zeros load in place of the next one's
      pixel_pair(oy, ox,
                 _mm512_maskz_loadu_epi16(0xffff, line + static_cast<std::size_t>(ox) * kLanes));
    }
  }
#pragma GCC unroll 32
  for (int i = 0; i < R * R; ++i) add_to(taps + static_cast<std::size_t>(i) * kLanes, acc[i]);
  add_to(bias, acc_b);
}

template <int R>
void filter_grad(const ConvGeom& g, const float* x, const std::uint16_t* dy16, float* dw,
                 float* db) {
  const int oh = g.out_h(), ow = g.out_w(), blocks = g.k / kLanes;
  const std::size_t plane = static_cast<std::size_t>(oh) * ow * kLanes;
  // Double totals per block: taps [R][R][16], bias [16].
  std::vector<double> taps(static_cast<std::size_t>(blocks) * R * R * kLanes, 0.0),
      bias(static_cast<std::size_t>(g.k), 0.0);
  Padded p(g);
  for (int n = 0; n < g.n; ++n) {
    p.load(g, x, n);
    for (int kb = 0; kb < blocks; ++kb) {
      filter_image<R>(p, dy16 + (static_cast<std::size_t>(n) * blocks + kb) * plane, oh, ow,
                      taps.data() + static_cast<std::size_t>(kb) * R * R * kLanes,
                      bias.data() + kb * kLanes);
    }
  }
  for (int k = 0; k < g.k; ++k) {
    const double* t = taps.data() + static_cast<std::size_t>(k / kLanes) * R * R * kLanes;
    for (int rs = 0; rs < R * R; ++rs)
      dw[static_cast<std::size_t>(k) * R * R + rs] =
          static_cast<float>(t[rs * kLanes + k % kLanes]);
    db[k] = static_cast<float>(bias[k]);
  }
}

}  // namespace

bool image_kernels_fit(const ConvGeom& g) {
  return g.c == 1 && g.k > 0 && g.k % kLanes == 0 && g.r >= 1 && g.r <= kMaxWidth && g.pad >= 0 &&
         g.n >= 0 && g.r <= g.h + 2 * g.pad && g.r <= g.w + 2 * g.pad;
}

void image_forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y) {
  MNIST_DDP_CHECK(image_kernels_fit(g), "bf16 image convolution: geometry it does not take");
  blocked::with_taps<kMaxWidth>(g.r, [&]<int R>() { forward<R>(g, x, w, b, y); });
}

void image_filter_grad(const ConvGeom& g, const float* x, const std::uint16_t* dy16, float* dw,
                       float* db) {
  MNIST_DDP_CHECK(image_kernels_fit(g), "bf16 image convolution: geometry it does not take");
  blocked::with_taps<kMaxWidth>(g.r, [&]<int R>() { filter_grad<R>(g, x, dy16, dw, db); });
}

#else  // no AVX512-BF16 in this build: oneDNN runs these passes

bool image_kernels_fit(const ConvGeom&) {
  return false;
}

void image_forward(const ConvGeom&, const float*, const float*, const float*, float*) {
  MNIST_DDP_CHECK(false, "bf16 image convolution: not in this build (no AVX512-BF16)");
}

void image_filter_grad(const ConvGeom&, const float*, const std::uint16_t*, float*, float*) {
  MNIST_DDP_CHECK(false, "bf16 image convolution: not in this build (no AVX512-BF16)");
}

#endif

}  // namespace mnist_ddp::bf16
