// blocked_ops.cpp — BN / ReLU / maxpool / flatten kernels on [N][C/B][H][W][B] activations,
// B = 8 or 16: the per-channel math of the fused BN->ReLU->maxpool kernels (moments, scale and
// shift, the backward coefficients, SyncBN's exchanges) around their four loops over the pixels,
// which run as AVX2+FMA intrinsics (blocked_avx2.cpp) where the build has them, else as generic
// C++ (blocked_generic.cpp); and the layout conversions.
#include "ops/cpu/blocked_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "mnist_ddp/diagnostics/check.hpp"
#include "ops/cpu/blocked_loops.hpp"

namespace mnist_ddp::blocked {
namespace {

void check_blocked(int block, int c) {
  MNIST_DDP_CHECK(block == 8 || block == 16, "channel block must be 8 or 16");
  MNIST_DDP_CHECK(c % block == 0, "channel count not a multiple of the channel block");
}

// The fused 2x2 pooling covers every pixel only on even sides (an odd last row or column would
// be left out of the pooling yet be in the BN statistics, and get no input gradient).
void check_pooled(int h, int w) {
  MNIST_DDP_CHECK(h % 2 == 0 && w % 2 == 0, "fused BN->ReLU->pool needs an even height and width");
}

// The fused kernels' pixel loops: AVX2+FMA intrinsics where this build has them (both blocks),
// else the generic C++ ones; the same per-lane arithmetic either way (tested bit for bit).
const PixelLoops& pixel_loops(int block) {
  if constexpr (kAvx2Build) {
    return avx2_loops(block);
  } else {
    return generic_loops(block);
  }
}

void stats_b(int block, int c, int n, int hw, const float* x, double eps, double momentum,
             float* save_mean, float* save_invstd, float* running_mean, float* running_var,
             const BnSync* sync) {
  double m = static_cast<double>(n) * hw;
  std::vector<double> means(static_cast<std::size_t>(c)), vars(static_cast<std::size_t>(c));
  pixel_loops(block).stats_sums(c, n, hw, x, means.data(),
                                vars.data());  // sums, made moments below
  for (int ch = 0; ch < c; ++ch) {
    const double s = means[ch], ss = vars[ch];
    means[ch] = s / m;
    vars[ch] = std::max(ss / m - means[ch] * means[ch], 0.0);
  }
  if (sync != nullptr) sync->stats(c, means.data(), vars.data(), &m);
  for (int ch = 0; ch < c; ++ch) {
    const double mean = means[ch], var = vars[ch];
    save_mean[ch] = static_cast<float>(mean);
    save_invstd[ch] = static_cast<float>(1.0 / std::sqrt(var + eps));
    const double unbiased = m > 1 ? var * m / (m - 1) : var;
    running_mean[ch] = static_cast<float>((1 - momentum) * running_mean[ch] + momentum * mean);
    running_var[ch] = static_cast<float>((1 - momentum) * running_var[ch] + momentum * unbiased);
  }
}

void forward_b(int block, int c, int n, int h, int w, const float* x, const float* gamma,
               const float* beta, const float* mean, const float* invstd, float* y,
               std::uint8_t* argmax, std::uint16_t* y16) {
  std::vector<float> scale(static_cast<std::size_t>(c)), shift(static_cast<std::size_t>(c));
  for (int ch = 0; ch < c; ++ch) {
    const double sc = static_cast<double>(gamma[ch]) * invstd[ch];
    scale[ch] = static_cast<float>(sc);
    shift[ch] = static_cast<float>(beta[ch] - static_cast<double>(mean[ch]) * sc);
  }
  pixel_loops(block).forward(c, n, h, w, x, scale.data(), shift.data(), y, argmax, y16);
}

void backward_b(int block, int c, int n, int h, int w, const float* x, const float* y,
                const float* dy, const std::uint8_t* argmax, const float* gamma, const float* mean,
                const float* invstd, bool batch_stats, float* dx, float* dgamma, float* dbeta,
                const BnSync* sync, std::uint16_t* dx16) {
  const std::size_t cs = static_cast<std::size_t>(c);
  double m_full = static_cast<double>(n) * h * w;
  std::vector<double> s1(cs), s2(cs), sums(2 * cs);
  pixel_loops(block).grad_sums(c, n, h, w, x, y, dy, argmax, mean, s1.data(), s2.data());
  for (int ch = 0; ch < c; ++ch) {
    // dgamma/dbeta are this rank's (DDP averages them like every gradient).
    dbeta[ch] = static_cast<float>(s1[ch]);
    dgamma[ch] = static_cast<float>(s2[ch] * invstd[ch]);
    sums[2 * ch] = s1[ch];
    sums[2 * ch + 1] = s2[ch];
  }
  if (sync != nullptr && batch_stats) sync->grad_sums(c, sums.data(), &m_full);
  std::vector<float> kk(cs), c0(cs), c1(cs);
  for (int ch = 0; ch < c; ++ch) {
    const double is = invstd[ch];
    const double k = gamma[ch] * is;
    kk[ch] = static_cast<float>(k);
    // Training BN: dx = c0 + (x - mu) * c1 + k*dy; fixed statistics: dx = k*dy.
    c0[ch] = batch_stats ? static_cast<float>(-k * sums[2 * ch] / m_full) : 0.f;
    c1[ch] = batch_stats ? static_cast<float>(-k * sums[2 * ch + 1] * is * is / m_full) : 0.f;
  }
  pixel_loops(block).backward(c, n, h, w, x, y, dy, argmax, mean, kk.data(), c0.data(), c1.data(),
                              dx, dx16);
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
                     const BnSync* sync) {
  check_blocked(block, c);
  stats_b(block, c, n, hw, x, eps, momentum, save_mean, save_invstd, running_mean, running_var,
          sync);
}
void bn_relu_pool_forward(int block, int c, int n, int h, int w, const float* x, const float* gamma,
                          const float* beta, const float* mean, const float* invstd, float* y,
                          std::uint8_t* argmax, std::uint16_t* y16) {
  check_blocked(block, c);
  check_pooled(h, w);
  forward_b(block, c, n, h, w, x, gamma, beta, mean, invstd, y, argmax, y16);
}
void bn_relu_pool_backward(int block, int c, int n, int h, int w, const float* x, const float* y,
                           const float* dy, const std::uint8_t* argmax, const float* gamma,
                           const float* mean, const float* invstd, bool batch_stats, float* dx,
                           float* dgamma, float* dbeta, const BnSync* sync, std::uint16_t* dx16) {
  check_blocked(block, c);
  check_pooled(h, w);
  MNIST_DDP_CHECK(dx != nullptr || dx16 != nullptr, "BN->ReLU->pool backward with no output");
  backward_b(block, c, n, h, w, x, y, dy, argmax, gamma, mean, invstd, batch_stats, dx, dgamma,
             dbeta, sync, dx16);
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
