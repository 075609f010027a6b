// blocked_avx2.cpp — the fused BN->ReLU->maxpool pixel loops in AVX2+FMA intrinsics, a template
// on the block B (a pixel is B/8 groups of 8 lanes, one __m256 each). Why intrinsics: GCC 12 made
// the generic per-window lane loops one call per window (the B = 8 window does half the work of
// a B = 16 one for the same overhead) and left the backward one partly scalar under
// -march=x86-64-v3; and the BN sums are chains of dependent adds, one per lane, that kept the
// adder waiting at 8 lanes a pass. Here a row of windows is one loop, and the sums run over two
// lane groups at once (independent chains; each lane's order is unchanged).
#include "ops/cpu/blocked_loops.hpp"

#if defined(__AVX2__) && defined(__FMA__)  // kAvx2Build

#include <immintrin.h>

#include <cstddef>
#include <cstring>

namespace mnist_ddp::blocked {
namespace {

constexpr int kLanes = 8;  // one __m256 of floats

std::size_t plane_of(int i, int cb_count, int cb) {
  return static_cast<std::size_t>(i) * cb_count + cb;
}

// Lanes 0-3 and 4-7 of v widened to double.
__m256d low_pd(__m256 v) {
  return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}
__m256d high_pd(__m256 v) {
  return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}

// The 8 argmax bytes at p as 32-bit lanes.
__m256i load_arg(const std::uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// One pass of a sum covers NB channel blocks from cb, B/8 lane groups each: group j is block
// cb + j / (B/8), lanes (j % (B/8)) * 8 .. +7 of each pixel, channels from group_channel(j).
template <int B>
struct Pass {
  static constexpr int kGroupsPerBlock = B / kLanes;
  int cb;
  std::size_t block_of(int j) const { return static_cast<std::size_t>(cb + j / kGroupsPerBlock); }
  std::size_t lane_of(int j) const {
    return static_cast<std::size_t>(j % kGroupsPerBlock) * kLanes;
  }
  std::size_t group_channel(int j) const { return block_of(j) * B + lane_of(j); }
};

// Stores the double sums of NG groups (lanes 0-3 in lo, 4-7 in hi) to out[channel].
template <int B, int NG>
void store_sums(const Pass<B>& pass, const __m256d* lo, const __m256d* hi, double* out) {
  for (int j = 0; j < NG; ++j) {
    _mm256_storeu_pd(out + pass.group_channel(j), lo[j]);
    _mm256_storeu_pd(out + pass.group_channel(j) + 4, hi[j]);
  }
}

template <int B, int NB>
void stats_pass(int cb_count, int cb, int n, int hw, const float* x, double* s, double* ss) {
  constexpr int NG = NB * B / kLanes;
  const Pass<B> pass{cb};
  __m256d s_lo[NG], s_hi[NG], q_lo[NG], q_hi[NG];
  for (int j = 0; j < NG; ++j) s_lo[j] = s_hi[j] = q_lo[j] = q_hi[j] = _mm256_setzero_pd();
  for (int i = 0; i < n; ++i) {
    const float* p[NG];
    for (int j = 0; j < NG; ++j) {
      p[j] =
          x + plane_of(i, cb_count, static_cast<int>(pass.block_of(j))) * hw * B + pass.lane_of(j);
    }
    for (int q = 0; q < hw; ++q) {
      for (int j = 0; j < NG; ++j) {
        const __m256 v = _mm256_loadu_ps(p[j] + static_cast<std::size_t>(q) * B);
        const __m256d lo = low_pd(v), hi = high_pd(v);
        s_lo[j] = _mm256_add_pd(s_lo[j], lo);
        s_hi[j] = _mm256_add_pd(s_hi[j], hi);
        // A float squared is exact in double: the fused form rounds once, like the add.
        q_lo[j] = _mm256_fmadd_pd(lo, lo, q_lo[j]);
        q_hi[j] = _mm256_fmadd_pd(hi, hi, q_hi[j]);
      }
    }
  }
  store_sums<B, NG>(pass, s_lo, s_hi, s);
  store_sums<B, NG>(pass, q_lo, q_hi, ss);
}

template <int B, int NB>
void grad_sums_pass(int cb_count, int cb, int n, int h, int w, const float* x, const float* y,
                    const float* dy, const std::uint8_t* argmax, const float* mean, double* s1,
                    double* s2) {
  constexpr int NG = NB * B / kLanes;
  const Pass<B> pass{cb};
  const int oh = h / 2, ow = w / 2;
  const std::size_t row = static_cast<std::size_t>(w) * B;
  const __m256 zero = _mm256_setzero_ps();
  const __m256i k0 = _mm256_setzero_si256(), k1 = _mm256_set1_epi32(1);
  const __m256i k2 = _mm256_set1_epi32(2);
  __m256 mu[NG];
  __m256d a_lo[NG], a_hi[NG], b_lo[NG], b_hi[NG];
  for (int j = 0; j < NG; ++j) {
    mu[j] = _mm256_loadu_ps(mean + pass.group_channel(j));
    a_lo[j] = a_hi[j] = b_lo[j] = b_hi[j] = _mm256_setzero_pd();
  }
  for (int i = 0; i < n; ++i) {
    // Float partial sums over one plane (<= 196 windows), folded into double per plane.
    __m256 p1[NG], p2[NG];
    const float* xp[NG];
    std::size_t q0[NG];
    for (int j = 0; j < NG; ++j) {
      p1[j] = p2[j] = zero;
      const std::size_t plane = plane_of(i, cb_count, static_cast<int>(pass.block_of(j)));
      xp[j] = x + plane * h * w * B + pass.lane_of(j);
      q0[j] = plane * oh * ow * B + pass.lane_of(j);
    }
    for (int oy = 0; oy < oh; ++oy) {
      for (int ox = 0; ox < ow; ++ox) {
        const std::size_t qo = (static_cast<std::size_t>(oy) * ow + ox) * B;
        const std::size_t xo = (static_cast<std::size_t>(2 * oy) * w + 2 * ox) * B;
        for (int j = 0; j < NG; ++j) {
          const std::size_t q = q0[j] + qo;
          const float* a = xp[j] + xo;
          const __m256i k = load_arg(argmax + q);
          const __m256 yv = _mm256_loadu_ps(y + q), dv = _mm256_loadu_ps(dy + q);
          // g = y > 0 ? dy : +0 (the ReLU's mask).
          const __m256 g = _mm256_and_ps(_mm256_cmp_ps(yv, zero, _CMP_GT_OQ), dv);
          // x at the argmax: k == 0 ? x0 : x1, k == 2 ? x2 : x3, then k > 1 takes the second.
          const __m256 x01 = _mm256_blendv_ps(_mm256_loadu_ps(a + B), _mm256_loadu_ps(a),
                                              _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, k0)));
          const __m256 x23 =
              _mm256_blendv_ps(_mm256_loadu_ps(a + row + B), _mm256_loadu_ps(a + row),
                               _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, k2)));
          const __m256 xv =
              _mm256_blendv_ps(x01, x23, _mm256_castsi256_ps(_mm256_cmpgt_epi32(k, k1)));
          p1[j] = _mm256_add_ps(p1[j], g);
          p2[j] = _mm256_fmadd_ps(g, _mm256_sub_ps(xv, mu[j]), p2[j]);
        }
      }
    }
    for (int j = 0; j < NG; ++j) {
      a_lo[j] = _mm256_add_pd(a_lo[j], low_pd(p1[j]));
      a_hi[j] = _mm256_add_pd(a_hi[j], high_pd(p1[j]));
      b_lo[j] = _mm256_add_pd(b_lo[j], low_pd(p2[j]));
      b_hi[j] = _mm256_add_pd(b_hi[j], high_pd(p2[j]));
    }
  }
  store_sums<B, NG>(pass, a_lo, a_hi, s1);
  store_sums<B, NG>(pass, b_lo, b_hi, s2);
}

template <int B>
void stats_sums_b(int c, int n, int hw, const float* x, double* s, double* ss) {
  const int cb_count = c / B;
  if constexpr (B == 8) {
    int cb = 0;
    for (; cb + 1 < cb_count; cb += 2) stats_pass<B, 2>(cb_count, cb, n, hw, x, s, ss);
    for (; cb < cb_count; ++cb) stats_pass<B, 1>(cb_count, cb, n, hw, x, s, ss);
  } else {
    for (int cb = 0; cb < cb_count; ++cb) stats_pass<B, 1>(cb_count, cb, n, hw, x, s, ss);
  }
}

template <int B>
void grad_sums_b(int c, int n, int h, int w, const float* x, const float* y, const float* dy,
                 const std::uint8_t* argmax, const float* mean, double* s1, double* s2) {
  const int cb_count = c / B;
  int cb = 0;
  if constexpr (B == 8) {
    for (; cb + 1 < cb_count; cb += 2) {
      grad_sums_pass<B, 2>(cb_count, cb, n, h, w, x, y, dy, argmax, mean, s1, s2);
    }
  }
  for (; cb < cb_count; ++cb) {
    grad_sums_pass<B, 1>(cb_count, cb, n, h, w, x, y, dy, argmax, mean, s1, s2);
  }
}

// 8 floats to bf16 at p (half.hpp's to_bf16 on each: round to nearest even, NaN quietened): the
// CPU's conversion where it has AVX512-BF16, else the same rounding in AVX2 integer operations.
inline void store_bf16(std::uint16_t* p, __m256 v) {
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
  const __m128bh h = _mm256_cvtneps_pbh(v);
  std::memcpy(p, &h, sizeof h);
#else
  const __m256i u = _mm256_castps_si256(v);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd));
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  const __m256i top = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
  // packus per 128-bit lane: [a0..a3 a0..a3 | a4..a7 a4..a7]; the permute brings a0..a7 low.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(top, top), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
#endif
}

template <int B>
void forward_b(int c, int n, int h, int w, const float* x, const float* scale, const float* shift,
               float* y, std::uint8_t* argmax, std::uint16_t* y16) {
  constexpr int G = B / kLanes;  // lane groups per pixel, all done per window
  const int cb_count = c / B, oh = h / 2, ow = w / 2;
  const std::size_t row = static_cast<std::size_t>(w) * B;
  const __m256 zero = _mm256_setzero_ps();
  const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
  for (int cb = 0; cb < cb_count; ++cb) {
    __m256 sc[G], sh[G];
    for (int g = 0; g < G; ++g) {
      sc[g] = _mm256_loadu_ps(scale + static_cast<std::size_t>(cb) * B + g * kLanes);
      sh[g] = _mm256_loadu_ps(shift + static_cast<std::size_t>(cb) * B + g * kLanes);
    }
    for (int i = 0; i < n; ++i) {
      const std::size_t plane = plane_of(i, cb_count, cb);
      const float* xp = x + plane * h * w * B;
      float* yp = y + plane * oh * ow * B;
      std::uint8_t* ap = argmax + plane * oh * ow * B;
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          const std::size_t o = (static_cast<std::size_t>(oy) * ow + ox) * B;
          for (int g = 0; g < G; ++g) {
            const float* a = xp + (static_cast<std::size_t>(2 * oy) * w + 2 * ox) * B + g * kLanes;
            const __m256 va = _mm256_fmadd_ps(_mm256_loadu_ps(a), sc[g], sh[g]);
            const __m256 vb = _mm256_fmadd_ps(_mm256_loadu_ps(a + B), sc[g], sh[g]);
            const __m256 vc = _mm256_fmadd_ps(_mm256_loadu_ps(a + row), sc[g], sh[g]);
            const __m256 vd = _mm256_fmadd_ps(_mm256_loadu_ps(a + row + B), sc[g], sh[g]);
            // First maximum in row-major window order wins ties (PyTorch's rule): strict >.
            const __m256 gt01 = _mm256_cmp_ps(vb, va, _CMP_GT_OQ);
            const __m256 gt23 = _mm256_cmp_ps(vd, vc, _CMP_GT_OQ);
            const __m256 m01 = _mm256_blendv_ps(va, vb, gt01);
            const __m256 m23 = _mm256_blendv_ps(vc, vd, gt23);
            const __m256 gt = _mm256_cmp_ps(m23, m01, _CMP_GT_OQ);
            const __m256 best = _mm256_blendv_ps(m01, m23, gt);
            const std::size_t og = o + g * kLanes;
            const __m256 out = _mm256_and_ps(_mm256_cmp_ps(best, zero, _CMP_GT_OQ), best);
            _mm256_storeu_ps(yp + og, out);
            if (y16 != nullptr) store_bf16(y16 + plane * oh * ow * B + og, out);
            // Index: gt01 ? 1 : 0, gt23 ? 3 : 2, gt takes the second pair; 8 x i32 -> 8 bytes.
            const __m256i i01 = _mm256_and_si256(_mm256_castps_si256(gt01), one);
            const __m256i i23 =
                _mm256_add_epi32(two, _mm256_and_si256(_mm256_castps_si256(gt23), one));
            const __m256i idx = _mm256_blendv_epi8(i01, i23, _mm256_castps_si256(gt));
            const __m128i w16 =
                _mm_packus_epi32(_mm256_castsi256_si128(idx), _mm256_extracti128_si256(idx, 1));
            _mm_storel_epi64(reinterpret_cast<__m128i*>(ap + og), _mm_packus_epi16(w16, w16));
          }
        }
      }
    }
  }
}

template <int B>
void backward_b(int c, int n, int h, int w, const float* x, const float* y, const float* dy,
                const std::uint8_t* argmax, const float* mean, const float* kk, const float* c0,
                const float* c1, float* dx, std::uint16_t* dx16) {
  constexpr int G = B / kLanes;  // lane groups per pixel, all done per window
  const int cb_count = c / B, oh = h / 2, ow = w / 2;
  const std::size_t row = static_cast<std::size_t>(w) * B;
  const __m256 zero = _mm256_setzero_ps();
  const __m256i k0 = _mm256_setzero_si256(), k1 = _mm256_set1_epi32(1);
  const __m256i k2 = _mm256_set1_epi32(2), k3 = _mm256_set1_epi32(3);
  for (int cb = 0; cb < cb_count; ++cb) {
    __m256 mu[G], k_v[G], c0_v[G], c1_v[G];
    for (int g = 0; g < G; ++g) {
      const std::size_t ch = static_cast<std::size_t>(cb) * B + g * kLanes;
      mu[g] = _mm256_loadu_ps(mean + ch);
      k_v[g] = _mm256_loadu_ps(kk + ch);
      c0_v[g] = _mm256_loadu_ps(c0 + ch);
      c1_v[g] = _mm256_loadu_ps(c1 + ch);
    }
    for (int i = 0; i < n; ++i) {
      const std::size_t plane = plane_of(i, cb_count, cb);
      const float* xp = x + plane * h * w * B;
      float* dxp = dx != nullptr ? dx + plane * h * w * B : nullptr;  // nullptr: the copy only
      std::uint16_t* hp = dx16 != nullptr ? dx16 + plane * h * w * B : nullptr;
      const std::size_t q0 = plane * oh * ow * B;
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          for (int g = 0; g < G; ++g) {
            const std::size_t q = q0 + (static_cast<std::size_t>(oy) * ow + ox) * B + g * kLanes;
            const std::size_t off =
                (static_cast<std::size_t>(2 * oy) * w + 2 * ox) * B + g * kLanes;
            const __m256i k = load_arg(argmax + q);
            const __m256 yv = _mm256_loadu_ps(y + q), dv = _mm256_loadu_ps(dy + q);
            const __m256 masked = _mm256_and_ps(_mm256_cmp_ps(yv, zero, _CMP_GT_OQ), dv);
            const __m256 g_v = _mm256_mul_ps(masked, k_v[g]);
            // dx = c0 + (x - mu) * c1, + g where this pixel is the argmax (+0 elsewhere).
            const auto put = [&](std::size_t p, __m256i kj) {
              const __m256 at = _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, kj));
              const __m256 xv = _mm256_loadu_ps(xp + off + p);
              const __m256 base = _mm256_fmadd_ps(_mm256_sub_ps(xv, mu[g]), c1_v[g], c0_v[g]);
              const __m256 out = _mm256_add_ps(base, _mm256_and_ps(at, g_v));
              if (dxp != nullptr) _mm256_storeu_ps(dxp + off + p, out);
              if (hp != nullptr) store_bf16(hp + off + p, out);
            };
            put(0, k0);
            put(B, k1);
            put(row, k2);
            put(row + B, k3);
          }
        }
      }
    }
  }
}

template <int B>
constexpr PixelLoops kLoops{&stats_sums_b<B>, &forward_b<B>, &grad_sums_b<B>, &backward_b<B>};

}  // namespace

const PixelLoops& avx2_loops(int block) {
  return block == 8 ? kLoops<8> : kLoops<16>;
}

}  // namespace mnist_ddp::blocked

#endif  // __AVX2__ && __FMA__
