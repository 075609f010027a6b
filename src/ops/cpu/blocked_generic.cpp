// blocked_generic.cpp — the four loops of the fused BN->ReLU->maxpool kernels in portable C++,
// a template on the block B: per-window lane loops the compiler vectorises one block wide. What
// runs on a build without AVX2+FMA, and the arithmetic blocked_avx2.cpp matches bit for bit.
#include "mnist_ddp/base/half.hpp"
#include "ops/cpu/blocked_loops.hpp"

#include <cstddef>

namespace mnist_ddp::blocked {
namespace {

// The per-window lane loops live in functions whose pointer parameters are __restrict (GCC
// honours restrict on parameters, not on block-scope locals; noinline keeps it from losing
// that by inlining), so each becomes SIMD code.

// B channels of one pooling window: BN-apply, first argmax (as 0..3), ReLU of the max.
template <int B>
[[gnu::noinline]] void window_forward(const float* __restrict a, const float* __restrict b,
                                      const float* __restrict c, const float* __restrict d,
                                      const float* __restrict scale, const float* __restrict shift,
                                      float* __restrict out, std::uint8_t* __restrict arg) {
  float idx[B];
  for (int l = 0; l < B; ++l) {
    const float va = a[l] * scale[l] + shift[l], vb = b[l] * scale[l] + shift[l];
    const float vc = c[l] * scale[l] + shift[l], vd = d[l] * scale[l] + shift[l];
    // First maximum in row-major window order wins ties (PyTorch's rule).
    const float m01 = vb > va ? vb : va, m23 = vd > vc ? vd : vc;
    const float i01 = vb > va ? 1.f : 0.f, i23 = vd > vc ? 3.f : 2.f;
    idx[l] = m23 > m01 ? i23 : i01;
    const float best = m23 > m01 ? m23 : m01;
    out[l] = best > 0.f ? best : 0.f;
  }
  for (int l = 0; l < B; ++l) arg[l] = static_cast<std::uint8_t>(static_cast<int>(idx[l]));
}

// B channels of one window: accumulate g = relu-masked dy and g * (x[argmax] - mean).
template <int B>
[[gnu::noinline]] void window_sums(const float* __restrict a, const float* __restrict b,
                                   const float* __restrict c, const float* __restrict d,
                                   const float* __restrict y, const float* __restrict dy,
                                   const std::uint8_t* __restrict arg, const float* __restrict mu,
                                   float* __restrict p1, float* __restrict p2) {
  float kf[B];
  for (int l = 0; l < B; ++l) kf[l] = arg[l];
  for (int l = 0; l < B; ++l) {
    const float k = kf[l], yv = y[l], dv = dy[l];
    const float x0 = a[l], x1 = b[l], x2 = c[l], x3 = d[l];
    const float g = yv > 0.f ? dv : 0.f;
    const float xa = k == 0.f ? x0 : x1;
    const float xb = k == 2.f ? x2 : x3;
    const float xv = k < 1.5f ? xa : xb;
    p1[l] += g;
    p2[l] += g * (xv - mu[l]);
  }
}

// B channels of one window: dx = c0 + (x - mean) * c1 at all four positions, + k*g at argmax.
template <int B>
[[gnu::noinline]] void window_backward(const float* __restrict a, const float* __restrict b,
                                       const float* __restrict c, const float* __restrict d,
                                       const float* __restrict y, const float* __restrict dy,
                                       const std::uint8_t* __restrict arg,
                                       const float* __restrict mu, const float* __restrict kk,
                                       const float* __restrict c0, const float* __restrict c1,
                                       float* __restrict da, float* __restrict db,
                                       float* __restrict dc, float* __restrict dd) {
  // The argmax compared as an int, and `omp simd`: with float compares GCC 12 left this loop
  // scalar on AVX2 ("control flow in loop"), 1.7x slower (ops_bench BM_BnReluPool/backward).
#pragma omp simd
  for (int l = 0; l < B; ++l) {
    const int k = arg[l];
    const float yv = y[l], dv = dy[l];
    const float x0 = a[l], x1 = b[l], x2 = c[l], x3 = d[l];
    const float g = (yv > 0.f ? dv : 0.f) * kk[l];
    const float g0 = k == 0 ? g : 0.f, g1 = k == 1 ? g : 0.f;
    const float g2 = k == 2 ? g : 0.f, g3 = k == 3 ? g : 0.f;
    da[l] = c0[l] + (x0 - mu[l]) * c1[l] + g0;
    db[l] = c0[l] + (x1 - mu[l]) * c1[l] + g1;
    dc[l] = c0[l] + (x2 - mu[l]) * c1[l] + g2;
    dd[l] = c0[l] + (x3 - mu[l]) * c1[l] + g3;
  }
}

// Per channel: s += x, ss += x*x (double), in order image, then pixel. s, ss: [C].
template <int B>
void stats_sums_b(int c, int n, int hw, const float* x, double* s_out, double* ss_out) {
  const int cb_count = c / B;
  for (int cb = 0; cb < cb_count; ++cb) {
    double s[B] = {}, ss[B] = {};
    for (int i = 0; i < n; ++i) {
      const float* p = x + (static_cast<std::size_t>(i) * cb_count + cb) * hw * B;
      for (int q = 0; q < hw; ++q) {
        for (int l = 0; l < B; ++l) {
          const double v = p[q * B + l];
          s[l] += v;
          ss[l] += v * v;
        }
      }
    }
    for (int l = 0; l < B; ++l) {
      s_out[cb * B + l] = s[l];
      ss_out[cb * B + l] = ss[l];
    }
  }
}

// y = relu(maxpool(x * scale + shift)) and the argmax; scale, shift: [C].
template <int B>
void forward_apply_b(int c, int n, int h, int w, const float* x, const float* scale,
                     const float* shift, float* y, std::uint8_t* argmax, std::uint16_t* y16) {
  const int cb_count = c / B, oh = h / 2, ow = w / 2;
  for (int cb = 0; cb < cb_count; ++cb) {
    const float* sc = scale + cb * B;
    const float* sh = shift + cb * B;
    for (int i = 0; i < n; ++i) {
      const std::size_t plane = static_cast<std::size_t>(i) * cb_count + cb;
      const float* xp = x + plane * h * w * B;
      float* yp = y + plane * oh * ow * B;
      std::uint8_t* ap = argmax + plane * oh * ow * B;
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          const float* a = xp + (static_cast<std::size_t>(2 * oy) * w + 2 * ox) * B;
          const std::size_t o = (static_cast<std::size_t>(oy) * ow + ox) * B;
          window_forward<B>(a, a + B, a + static_cast<std::size_t>(w) * B,
                            a + static_cast<std::size_t>(w) * B + B, sc, sh, yp + o, ap + o);
          if (y16 != nullptr) to_bf16(B, yp + o, y16 + plane * oh * ow * B + o);
        }
      }
    }
  }
}

// Per channel: s1 = sum of relu-masked dy, s2 = sum of it times (x[argmax] - mean), float per
// image plane, then double. The BN output gradient is non-zero only at each window's argmax where
// the ReLU passed: the BN reductions run over the pooled grid. mean, s1, s2: [C].
template <int B>
void grad_sums_b(int c, int n, int h, int w, const float* x, const float* y, const float* dy,
                 const std::uint8_t* argmax, const float* mean, double* s1_out, double* s2_out) {
  using Lane = float[B];
  const int cb_count = c / B, oh = h / 2, ow = w / 2;
  for (int cb = 0; cb < cb_count; ++cb) {
    const float* mu = mean + cb * B;
    double s1[B] = {}, s2[B] = {};
    for (int i = 0; i < n; ++i) {
      const std::size_t plane = static_cast<std::size_t>(i) * cb_count + cb;
      const float* xp = x + plane * h * w * B;
      const std::size_t q0 = plane * oh * ow * B;
      // Float partial sums over one plane (<= 196 windows), folded into double per plane.
      Lane p1 = {}, p2 = {};
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          const std::size_t q = q0 + (static_cast<std::size_t>(oy) * ow + ox) * B;
          const float* a = xp + (static_cast<std::size_t>(2 * oy) * w + 2 * ox) * B;
          const float* cc = a + static_cast<std::size_t>(w) * B;
          window_sums<B>(a, a + B, cc, cc + B, y + q, dy + q, argmax + q, mu, p1, p2);
        }
      }
      for (int l = 0; l < B; ++l) {
        s1[l] += p1[l];
        s2[l] += p2[l];
      }
    }
    for (int l = 0; l < B; ++l) {
      s1_out[cb * B + l] = s1[l];
      s2_out[cb * B + l] = s2[l];
    }
  }
}

// dx = c0 + (x - mean) * c1 at every window position, + kk * g at the argmax; all [C].
template <int B>
void backward_apply_b(int c, int n, int h, int w, const float* x, const float* y, const float* dy,
                      const std::uint8_t* argmax, const float* mean, const float* kk,
                      const float* c0, const float* c1, float* dx, std::uint16_t* dx16) {
  const int cb_count = c / B, oh = h / 2, ow = w / 2;
  for (int cb = 0; cb < cb_count; ++cb) {
    const int o = cb * B;
    for (int i = 0; i < n; ++i) {
      const std::size_t plane = static_cast<std::size_t>(i) * cb_count + cb;
      const float* xp = x + plane * h * w * B;
      float* dxp = dx != nullptr ? dx + plane * h * w * B : nullptr;
      const std::size_t q0 = plane * oh * ow * B;
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          const std::size_t q = q0 + (static_cast<std::size_t>(oy) * ow + ox) * B;
          const std::size_t off = (static_cast<std::size_t>(2 * oy) * w + 2 * ox) * B;
          const std::size_t row = static_cast<std::size_t>(w) * B;
          const float* a = xp + off;
          // The window's two rows of dx, in dx or (dx not wanted: only its bf16 copy) here.
          float window[4 * B];
          float* top = dxp != nullptr ? dxp + off : window;
          float* bottom = dxp != nullptr ? dxp + off + row : window + 2 * B;
          window_backward<B>(a, a + B, a + row, a + row + B, y + q, dy + q, argmax + q, mean + o,
                             kk + o, c0 + o, c1 + o, top, top + B, bottom, bottom + B);
          if (dx16 != nullptr) {
            std::uint16_t* hp = dx16 + plane * h * w * B + off;
            to_bf16(2 * B, top, hp);
            to_bf16(2 * B, bottom, hp + row);
          }
        }
      }
    }
  }
}

template <int B>
constexpr PixelLoops kLoops{&stats_sums_b<B>, &forward_apply_b<B>, &grad_sums_b<B>,
                            &backward_apply_b<B>};

}  // namespace

const PixelLoops& generic_loops(int block) {
  return block == 8 ? kLoops<8> : kLoops<16>;
}

}  // namespace mnist_ddp::blocked
