// blocked_ops.cpp — BN / ReLU / maxpool / flatten kernels on [N][C/B][H][W][B] activations,
// B = 8 or 16 (each kernel a template on B, instantiated for both; the public functions dispatch).
// Inner loops run over the B channels of a block: unconditional loads and floating-point
// selects only, so they compile to one SIMD vector per window position.
#include "ops/cpu/blocked_ops.hpp"

#include <cmath>
#include <cstddef>
#include <vector>

#include "mnist_ddp/runtime/check.hpp"

namespace mnist_ddp::blocked {
namespace {

void check_blocked(int block, int c) {
  MNIST_DDP_CHECK(block == 8 || block == 16, "channel block must be 8 or 16");
  MNIST_DDP_CHECK(c % block == 0, "channel count not a multiple of the channel block");
}

// Calls f.template operator()<B>() with the block as a compile-time constant.
template <typename F>
void with_block(int block, int c, F&& f) {
  check_blocked(block, c);
  if (block == 8) {
    f.template operator()<8>();
  } else {
    f.template operator()<16>();
  }
}

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

template <int B>
void stats_b(int c, int n, int hw, const float* x, double eps, double momentum, float* save_mean,
             float* save_invstd, float* running_mean, float* running_var, const cpu::BnSync* sync) {
  const int cb_count = c / B;
  double m = static_cast<double>(n) * hw;
  std::vector<double> means(static_cast<std::size_t>(c)), vars(static_cast<std::size_t>(c));
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
      const int ch = cb * B + l;
      means[ch] = s[l] / m;
      vars[ch] = std::max(ss[l] / m - means[ch] * means[ch], 0.0);
    }
  }
  if (sync != nullptr) sync->stats(c, means.data(), vars.data(), &m);
  for (int cb = 0; cb < cb_count; ++cb) {
    for (int l = 0; l < B; ++l) {
      const int ch = cb * B + l;
      const double mean = means[ch], var = vars[ch];
      save_mean[ch] = static_cast<float>(mean);
      save_invstd[ch] = static_cast<float>(1.0 / std::sqrt(var + eps));
      const double unbiased = m > 1 ? var * m / (m - 1) : var;
      running_mean[ch] = static_cast<float>((1 - momentum) * running_mean[ch] + momentum * mean);
      running_var[ch] = static_cast<float>((1 - momentum) * running_var[ch] + momentum * unbiased);
    }
  }
}

template <int B>
void forward_b(int c, int n, int h, int w, const float* x, const float* gamma, const float* beta,
               const float* mean, const float* invstd, float* y, std::uint8_t* argmax) {
  using Lane = float[B];
  const int cb_count = c / B, oh = h / 2, ow = w / 2;
  for (int cb = 0; cb < cb_count; ++cb) {
    Lane scale, shift;
    for (int l = 0; l < B; ++l) {
      const int ch = cb * B + l;
      const double sc = static_cast<double>(gamma[ch]) * invstd[ch];
      scale[l] = static_cast<float>(sc);
      shift[l] = static_cast<float>(beta[ch] - static_cast<double>(mean[ch]) * sc);
    }
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
                            a + static_cast<std::size_t>(w) * B + B, scale, shift, yp + o, ap + o);
        }
      }
    }
  }
}

template <int B>
void backward_b(int c, int n, int h, int w, const float* x, const float* y, const float* dy,
                const std::uint8_t* argmax, const float* gamma, const float* mean,
                const float* invstd, bool batch_stats, float* dx, float* dgamma, float* dbeta,
                const cpu::BnSync* sync) {
  using Lane = float[B];
  const int cb_count = c / B, oh = h / 2, ow = w / 2;
  double m_full = static_cast<double>(n) * h * w;
  std::vector<double> sums(2 * static_cast<std::size_t>(c));
  for (int cb = 0; cb < cb_count; ++cb) {
    Lane mu;
    for (int l = 0; l < B; ++l) mu[l] = mean[cb * B + l];
    // The BN output gradient is non-zero only at each window's argmax where the ReLU passed: the
    // BN reductions run over the pooled grid.
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
      const int ch = cb * B + l;
      // dgamma/dbeta are this rank's (DDP averages them like every gradient).
      dbeta[ch] = static_cast<float>(s1[l]);
      dgamma[ch] = static_cast<float>(s2[l] * invstd[ch]);
      sums[2 * ch] = s1[l];
      sums[2 * ch + 1] = s2[l];
    }
  }
  if (sync != nullptr && batch_stats) sync->grad_sums(c, sums.data(), &m_full);
  for (int cb = 0; cb < cb_count; ++cb) {
    Lane mu, kk, c0, c1;
    for (int l = 0; l < B; ++l) {
      const int ch = cb * B + l;
      mu[l] = mean[ch];
      const double is = invstd[ch];
      const double k = gamma[ch] * is;
      kk[l] = static_cast<float>(k);
      // Training BN: dx = c0 + (x - mu) * c1 + k*dy; fixed statistics: dx = k*dy.
      c0[l] = batch_stats ? static_cast<float>(-k * sums[2 * ch] / m_full) : 0.f;
      c1[l] = batch_stats ? static_cast<float>(-k * sums[2 * ch + 1] * is * is / m_full) : 0.f;
    }
    for (int i = 0; i < n; ++i) {
      const std::size_t plane = static_cast<std::size_t>(i) * cb_count + cb;
      const float* xp = x + plane * h * w * B;
      float* dxp = dx + plane * h * w * B;
      const std::size_t q0 = plane * oh * ow * B;
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          const std::size_t q = q0 + (static_cast<std::size_t>(oy) * ow + ox) * B;
          const std::size_t off = (static_cast<std::size_t>(2 * oy) * w + 2 * ox) * B;
          const std::size_t row = static_cast<std::size_t>(w) * B;
          const float* a = xp + off;
          window_backward<B>(a, a + B, a + row, a + row + B, y + q, dy + q, argmax + q, mu, kk, c0,
                             c1, dxp + off, dxp + off + B, dxp + off + row, dxp + off + row + B);
        }
      }
    }
  }
}

enum class Plain { Rows, Cnhw };  // [N][C*HW] (fc rows) or [C][N][HW] (reference layout)

// Element (image i, channel ch, pixel q) in the blocked layout and in a plain one.
std::size_t blocked_at(int block, int c, int hw, int i, int ch, int q) {
  return ((static_cast<std::size_t>(i) * (c / block) + ch / block) * hw + q) * block + ch % block;
}
std::size_t plain_at(Plain p, int c, int n, int hw, int i, int ch, int q) {
  return p == Plain::Rows ? (static_cast<std::size_t>(i) * c + ch) * hw + q
                          : (static_cast<std::size_t>(ch) * n + i) * hw + q;
}

// Copies between the blocked layout and a plain one (conversions, not the hot path).
void convert(Plain p, bool to_blocked, int block, int c, int n, int hw, const float* from,
             float* to) {
  check_blocked(block, c);
  for (int i = 0; i < n; ++i)
    for (int ch = 0; ch < c; ++ch)
      for (int q = 0; q < hw; ++q) {
        const std::size_t bk = blocked_at(block, c, hw, i, ch, q),
                          pl = plain_at(p, c, n, hw, i, ch, q);
        to[to_blocked ? bk : pl] = from[to_blocked ? pl : bk];
      }
}

}  // namespace

void batchnorm_stats(int block, int c, int n, int hw, const float* x, double eps, double momentum,
                     float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                     const cpu::BnSync* sync) {
  with_block(block, c, [&]<int B>() {
    stats_b<B>(c, n, hw, x, eps, momentum, save_mean, save_invstd, running_mean, running_var, sync);
  });
}
void bn_relu_pool_forward(int block, int c, int n, int h, int w, const float* x, const float* gamma,
                          const float* beta, const float* mean, const float* invstd, float* y,
                          std::uint8_t* argmax) {
  with_block(block, c,
             [&]<int B>() { forward_b<B>(c, n, h, w, x, gamma, beta, mean, invstd, y, argmax); });
}
void bn_relu_pool_backward(int block, int c, int n, int h, int w, const float* x, const float* y,
                           const float* dy, const std::uint8_t* argmax, const float* gamma,
                           const float* mean, const float* invstd, bool batch_stats, float* dx,
                           float* dgamma, float* dbeta, const cpu::BnSync* sync) {
  with_block(block, c, [&]<int B>() {
    backward_b<B>(c, n, h, w, x, y, dy, argmax, gamma, mean, invstd, batch_stats, dx, dgamma, dbeta,
                  sync);
  });
}
void to_rows(int block, int c, int n, int hw, const float* x, float* rows) {
  convert(Plain::Rows, false, block, c, n, hw, x, rows);
}
void from_rows(int block, int c, int n, int hw, const float* rows, float* x) {
  convert(Plain::Rows, true, block, c, n, hw, rows, x);
}
void from_cnhw(int block, int c, int n, int hw, const float* x, float* y) {
  convert(Plain::Cnhw, true, block, c, n, hw, x, y);
}
void to_cnhw(int block, int c, int n, int hw, const float* x, float* y) {
  convert(Plain::Cnhw, false, block, c, n, hw, x, y);
}

}  // namespace mnist_ddp::blocked
