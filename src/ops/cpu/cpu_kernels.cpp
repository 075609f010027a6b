// cpu_kernels.cpp — reference CPU kernels: im2col + OpenBLAS GEMM convolution, BatchNorm, ReLU,
// max pooling, linear, softmax cross-entropy, top-k, SGD. Templated on float/double.
#include "ops/cpu/cpu_kernels.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace mnist_ddp::cpu {
namespace {

void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// col[C*R*R][nb*OH*OW] for images n0..n0+nb of x[C][N][H][W].
template <class T>
void im2col(const ConvGeom& g, const T* x, int n0, int nb, T* col) {
  const int oh = g.out_h(), ow = g.out_w();
  const std::size_t ohw = static_cast<std::size_t>(oh) * ow;
  const std::size_t cols = nb * ohw;
  for (int c = 0; c < g.c; ++c) {
    for (int kh = 0; kh < g.r; ++kh) {
      for (int kw = 0; kw < g.r; ++kw) {
        T* row = col + (static_cast<std::size_t>(c * g.r + kh) * g.r + kw) * cols;
        const int lo = std::clamp(g.pad - kw, 0, ow);
        const int hi = std::clamp(g.w + g.pad - kw, lo, ow);
        for (int i = 0; i < nb; ++i) {
          const T* plane = x + (static_cast<std::size_t>(c) * g.n + n0 + i) * g.h * g.w;
          T* out = row + i * ohw;
          for (int y = 0; y < oh; ++y, out += ow) {
            const int ih = y + kh - g.pad;
            if (ih < 0 || ih >= g.h) {
              std::fill(out, out + ow, T(0));
              continue;
            }
            const T* src = plane + static_cast<std::size_t>(ih) * g.w + (kw - g.pad);
            std::fill(out, out + lo, T(0));
            std::copy(src + lo, src + hi, out + lo);
            std::fill(out + hi, out + ow, T(0));
          }
        }
      }
    }
  }
}

// Accumulates col back into dx (the adjoint of im2col).
template <class T>
void col2im(const ConvGeom& g, const T* col, int n0, int nb, T* dx) {
  const int oh = g.out_h(), ow = g.out_w();
  const std::size_t ohw = static_cast<std::size_t>(oh) * ow;
  const std::size_t cols = nb * ohw;
  for (int c = 0; c < g.c; ++c) {
    for (int kh = 0; kh < g.r; ++kh) {
      for (int kw = 0; kw < g.r; ++kw) {
        const T* row = col + (static_cast<std::size_t>(c * g.r + kh) * g.r + kw) * cols;
        const int lo = std::clamp(g.pad - kw, 0, ow);
        const int hi = std::clamp(g.w + g.pad - kw, lo, ow);
        for (int i = 0; i < nb; ++i) {
          T* plane = dx + (static_cast<std::size_t>(c) * g.n + n0 + i) * g.h * g.w;
          const T* in = row + i * ohw;
          for (int y = 0; y < oh; ++y, in += ow) {
            const int ih = y + kh - g.pad;
            if (ih < 0 || ih >= g.h) continue;
            T* dst = plane + static_cast<std::size_t>(ih) * g.w + (kw - g.pad);
            for (int xo = lo; xo < hi; ++xo) dst[xo] += in[xo];
          }
        }
      }
    }
  }
}

// Sum and sum of squares in double with 16 independent lanes, so the compiler vectorises the
// reduction (a single double accumulator is latency-bound at one add per 4 cycles).
template <class T>
void sum_sumsq(const T* x, std::size_t m, double* sum, double* sumsq) {
  constexpr int kLanes = 16;
  double a[kLanes] = {}, b[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= m; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double v = x[i + l];
      a[l] += v;
      b[l] += v * v;
    }
  }
  double s = 0, ss = 0;
  for (; i < m; ++i) {
    s += x[i];
    ss += static_cast<double>(x[i]) * x[i];
  }
  for (int l = 0; l < kLanes; ++l) {
    s += a[l];
    ss += b[l];
  }
  *sum = s;
  *sumsq = ss;
}

// Sums of dy and dy * (x - mean), vectorisable like sum_sumsq.
template <class T>
void sum_dy_dyxmu(const T* x, const T* dy, std::size_t m, double mean, double* sdy, double* sdx) {
  constexpr int kLanes = 16;
  double a[kLanes] = {}, b[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= m; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double d = dy[i + l];
      a[l] += d;
      b[l] += d * (x[i + l] - mean);
    }
  }
  double s = 0, t = 0;
  for (; i < m; ++i) {
    s += dy[i];
    t += dy[i] * (x[i] - mean);
  }
  for (int l = 0; l < kLanes; ++l) {
    s += a[l];
    t += b[l];
  }
  *sdy = s;
  *sdx = t;
}

}  // namespace

int conv2d_chunk(const ConvGeom& g) {
  // Keep one chunk's im2col matrix around 512 KiB so it stays in L2 between im2col and the GEMM
  // that consumes it. bench/ops_bench's BM_Conv*/<layer>/<images per chunk> sweep measured 1, 4
  // and 10 images per chunk within ~5% of each other at batch 100; 25 was 5-15% slower.
  if (g.chunk > 0) return std::min(g.chunk, std::max(1, g.n));
  constexpr std::size_t kTargetElems = 128 * 1024;
  const std::size_t per_image = static_cast<std::size_t>(g.c) * g.r * g.r * g.out_h() * g.out_w();
  const std::size_t nb =
      std::max<std::size_t>(1, kTargetElems / std::max<std::size_t>(1, per_image));
  return static_cast<int>(std::min<std::size_t>(nb, std::max(1, g.n)));
}

std::size_t conv2d_workspace(const ConvGeom& g) {
  return static_cast<std::size_t>(conv2d_chunk(g)) * g.c * g.r * g.r * g.out_h() * g.out_w();
}

template <class T>
void conv2d_forward(const ConvGeom& g, const T* x, const T* w, const T* b, T* y, T* work) {
  const int ohw = g.out_h() * g.out_w();
  const int kc = g.c * g.r * g.r;
  const int nb = conv2d_chunk(g);
  const int ld = g.n * ohw;
  for (int n0 = 0; n0 < g.n; n0 += nb) {
    const int cnt = std::min(nb, g.n - n0);
    im2col(g, x, n0, cnt, work);
    // y[:, n0*OHW : (n0+cnt)*OHW] = w[K][kc] * col[kc][cnt*OHW]
    gemm(false, false, g.k, cnt * ohw, kc, T(1), w, kc, work, cnt * ohw, T(0), y + n0 * ohw, ld);
  }
  for (int k = 0; k < g.k; ++k) {
    T* row = y + static_cast<std::size_t>(k) * ld;
    const T bk = b[k];
    for (int j = 0; j < ld; ++j) row[j] += bk;
  }
}

template <class T>
void conv2d_backward_filter(const ConvGeom& g, const T* x, const T* dy, T* dw, T* db, T* work) {
  const int ohw = g.out_h() * g.out_w();
  const int kc = g.c * g.r * g.r;
  const int nb = conv2d_chunk(g);
  const int ld = g.n * ohw;
  for (int n0 = 0; n0 < g.n; n0 += nb) {
    const int cnt = std::min(nb, g.n - n0);
    im2col(g, x, n0, cnt, work);
    // dw[K][kc] (+)= dy[K][cnt*OHW] * col[kc][cnt*OHW]^T
    gemm(false, true, g.k, kc, cnt * ohw, T(1), dy + n0 * ohw, ld, work, cnt * ohw,
         n0 == 0 ? T(0) : T(1), dw, kc);
  }
  for (int k = 0; k < g.k; ++k) {
    const T* row = dy + static_cast<std::size_t>(k) * ld;
    T s = 0;
    for (int j = 0; j < ld; ++j) s += row[j];
    db[k] = s;
  }
}

template <class T>
void conv2d_backward_data(const ConvGeom& g, const T* w, const T* dy, T* dx, T* work) {
  const int ohw = g.out_h() * g.out_w();
  const int kc = g.c * g.r * g.r;
  const int nb = conv2d_chunk(g);
  const int ld = g.n * ohw;
  std::fill(dx, dx + static_cast<std::size_t>(g.c) * g.n * g.h * g.w, T(0));
  for (int n0 = 0; n0 < g.n; n0 += nb) {
    const int cnt = std::min(nb, g.n - n0);
    // col[kc][cnt*OHW] = w[K][kc]^T * dy[K][cnt*OHW]
    gemm(true, false, kc, cnt * ohw, g.k, T(1), w, kc, dy + n0 * ohw, ld, T(0), work, cnt * ohw);
    col2im(g, work, n0, cnt, dx);
  }
}

template <class T>
void batchnorm_stats(int c, std::size_t m, const T* x, double eps, double momentum, T* save_mean,
                     T* save_invstd, T* running_mean, T* running_var, const BnSync* sync) {
  std::vector<double> means(static_cast<std::size_t>(c)), vars(static_cast<std::size_t>(c));
  double md = static_cast<double>(m);
  for (int ch = 0; ch < c; ++ch) {
    double s = 0, ss = 0;
    sum_sumsq(x + ch * m, m, &s, &ss);
    means[ch] = s / md;
    // One pass in double: the cancellation in E[x^2] - mean^2 is far below float resolution.
    vars[ch] = std::max(ss / md - means[ch] * means[ch], 0.0);
  }
  if (sync != nullptr) sync->stats(c, means.data(), vars.data(), &md);
  for (int ch = 0; ch < c; ++ch) {
    const double mean = means[ch], var = vars[ch];
    save_mean[ch] = static_cast<T>(mean);
    save_invstd[ch] = static_cast<T>(1.0 / std::sqrt(var + eps));
    const double unbiased = md > 1 ? var * md / (md - 1) : var;
    running_mean[ch] = static_cast<T>((1 - momentum) * running_mean[ch] + momentum * mean);
    running_var[ch] = static_cast<T>((1 - momentum) * running_var[ch] + momentum * unbiased);
  }
}

template <class T>
void batchnorm_eval_stats(int c, const T* running_mean, const T* running_var, double eps, T* mean,
                          T* invstd) {
  for (int ch = 0; ch < c; ++ch) {
    mean[ch] = running_mean[ch];
    invstd[ch] = static_cast<T>(1.0 / std::sqrt(static_cast<double>(running_var[ch]) + eps));
  }
}

template <class T>
void batchnorm_forward_train(int c, std::size_t m, const T* x, const T* gamma, const T* beta,
                             double eps, double momentum, T* y, T* save_mean, T* save_invstd,
                             T* running_mean, T* running_var) {
  batchnorm_stats(c, m, x, eps, momentum, save_mean, save_invstd, running_mean, running_var);
  for (int ch = 0; ch < c; ++ch) {
    const T* xc = x + ch * m;
    T* yc = y + ch * m;
    const double invstd = save_invstd[ch];
    const T scale = static_cast<T>(gamma[ch] * invstd);
    const T shift = static_cast<T>(beta[ch] - save_mean[ch] * gamma[ch] * invstd);
    for (std::size_t i = 0; i < m; ++i) yc[i] = xc[i] * scale + shift;
  }
}

// Row kernels of the fused BN->ReLU->pool op. They are written so GCC/Clang vectorise them:
// __restrict rows, every load unconditional, selects on floating-point values only (the window
// index is carried as a T in 0..3).

// One output row: y[j] = relu(max of the 2x2 window j of BN(x)), idx[j] = first argmax (0..3).
template <class T>
void pool_row_forward(int ow, const T* __restrict r0, const T* __restrict r1, T scale, T shift,
                      T* __restrict y, T* __restrict idx) {
  for (int j = 0; j < ow; ++j) {
    const T a = r0[2 * j] * scale + shift, b = r0[2 * j + 1] * scale + shift;
    const T c = r1[2 * j] * scale + shift, d = r1[2 * j + 1] * scale + shift;
    // First maximum in row-major order wins ties (PyTorch's rule).
    const T m01 = b > a ? b : a, m23 = d > c ? d : c;
    const T i01 = b > a ? T(1) : T(0), i23 = d > c ? T(3) : T(2);
    idx[j] = m23 > m01 ? i23 : i01;
    const T best = m23 > m01 ? m23 : m01;
    y[j] = best > T(0) ? best : T(0);
  }
}

// Per output: g = dy where the ReLU passed, and g * (x[argmax] - mean) for the BN reductions.
template <class T>
void pool_row_sums(int ow, const T* __restrict r0, const T* __restrict r1, const T* __restrict y,
                   const T* __restrict dy, const std::uint8_t* __restrict arg, T mean,
                   T* __restrict tg, T* __restrict tx) {
  for (int j = 0; j < ow; ++j) {
    const T dv = dy[j], yv = y[j], a = arg[j];
    const T x0 = r0[2 * j], x1 = r0[2 * j + 1], x2 = r1[2 * j], x3 = r1[2 * j + 1];
    const T g = yv > T(0) ? dv : T(0);
    const T xv = a == T(0) ? x0 : a == T(1) ? x1 : a == T(2) ? x2 : x3;
    tg[j] = g;
    tx[j] = g * (xv - mean);
  }
}

// dx over the two input rows of one output row: c0 + (x - mean) * c1, plus k*g at the argmax.
template <class T>
void pool_row_backward(int ow, const T* __restrict r0, const T* __restrict r1,
                       const T* __restrict y, const T* __restrict dy,
                       const std::uint8_t* __restrict arg, T mean, T c0, T c1, T k,
                       T* __restrict d0, T* __restrict d1) {
  for (int j = 0; j < ow; ++j) {
    const T dv = dy[j], yv = y[j], a = arg[j];
    const T x0 = r0[2 * j], x1 = r0[2 * j + 1], x2 = r1[2 * j], x3 = r1[2 * j + 1];
    const T g = yv > T(0) ? k * dv : T(0);
    d0[2 * j] = c0 + (x0 - mean) * c1 + (a == T(0) ? g : T(0));
    d0[2 * j + 1] = c0 + (x1 - mean) * c1 + (a == T(1) ? g : T(0));
    d1[2 * j] = c0 + (x2 - mean) * c1 + (a == T(2) ? g : T(0));
    d1[2 * j + 1] = c0 + (x3 - mean) * c1 + (a == T(3) ? g : T(0));
  }
}

template <class T>
void bn_relu_pool_forward(int c, int n, int h, int w, const T* x, const T* gamma, const T* beta,
                          const T* mean, const T* invstd, T* y, std::uint8_t* argmax) {
  const int oh = h / 2, ow = w / 2, pq = oh * ow;
  std::vector<T> idx(static_cast<std::size_t>(pq));
  for (int ch = 0; ch < c; ++ch) {
    const T scale = static_cast<T>(gamma[ch] * static_cast<double>(invstd[ch]));
    const T shift =
        static_cast<T>(beta[ch] - static_cast<double>(mean[ch]) * gamma[ch] * invstd[ch]);
    for (int img = 0; img < n; ++img) {
      const std::size_t plane = static_cast<std::size_t>(ch) * n + img;
      const T* xp = x + plane * h * w;
      T* yp = y + plane * pq;
      for (int i = 0; i < oh; ++i) {
        pool_row_forward(ow, xp + 2 * i * w, xp + (2 * i + 1) * w, scale, shift, yp + i * ow,
                         idx.data() + i * ow);
      }
      std::uint8_t* ap = argmax + plane * pq;
      for (int q = 0; q < pq; ++q) ap[q] = static_cast<std::uint8_t>(static_cast<int>(idx[q]));
    }
  }
}

template <class T>
void bn_relu_pool_backward(int c, int n, int h, int w, const T* x, const T* y, const T* dy,
                           const std::uint8_t* argmax, const T* gamma, const T* mean,
                           const T* invstd, bool batch_stats, T* dx, T* dgamma, T* dbeta,
                           const BnSync* sync) {
  const int oh = h / 2, ow = w / 2, pq = oh * ow;
  double m_full = static_cast<double>(n) * h * w;
  std::vector<T> tg(static_cast<std::size_t>(pq)), tx(static_cast<std::size_t>(pq));
  std::vector<double> sums(2 * static_cast<std::size_t>(c));
  for (int ch = 0; ch < c; ++ch) {
    const T mu = mean[ch];
    const double is = invstd[ch];
    // The BN output gradient is non-zero only at each window's argmax where the ReLU passed, so
    // the BN reductions run over the pooled grid (a plane at a time, summed in double lanes).
    double sum_dy = 0, sum_dy_xmu = 0;
    for (int img = 0; img < n; ++img) {
      const std::size_t plane = static_cast<std::size_t>(ch) * n + img;
      const T* xp = x + plane * h * w;
      for (int i = 0; i < oh; ++i) {
        const std::size_t q = plane * pq + static_cast<std::size_t>(i) * ow;
        pool_row_sums(ow, xp + 2 * i * w, xp + (2 * i + 1) * w, y + q, dy + q, argmax + q, mu,
                      tg.data() + i * ow, tx.data() + i * ow);
      }
      double s1 = 0, s2 = 0, unused = 0;
      sum_sumsq(tg.data(), tg.size(), &s1, &unused);
      sum_sumsq(tx.data(), tx.size(), &s2, &unused);
      sum_dy += s1;
      sum_dy_xmu += s2;
    }
    // dgamma/dbeta are this rank's (DDP averages them like every gradient).
    dbeta[ch] = static_cast<T>(sum_dy);
    dgamma[ch] = static_cast<T>(sum_dy_xmu * is);
    sums[2 * ch] = sum_dy;
    sums[2 * ch + 1] = sum_dy_xmu;
  }
  if (sync != nullptr && batch_stats) sync->grad_sums(c, sums.data(), &m_full);
  for (int ch = 0; ch < c; ++ch) {
    const T mu = mean[ch];
    const double is = invstd[ch];
    const double sum_dy = sums[2 * ch], sum_dy_xmu = sums[2 * ch + 1];
    const T k = static_cast<T>(gamma[ch] * is);
    // Training BN: dx = k * (dy - mean(dy) - xhat * mean(dy * xhat)) = c0 + (x - mu) * c1 + k*dy;
    // fixed statistics: dx = k * dy.
    const double md = m_full;
    const T c0 = batch_stats ? static_cast<T>(-k * sum_dy / md) : T(0);
    const T c1 = batch_stats ? static_cast<T>(-k * sum_dy_xmu * is * is / md) : T(0);
    for (int img = 0; img < n; ++img) {
      const std::size_t plane = static_cast<std::size_t>(ch) * n + img;
      const T* xp = x + plane * h * w;
      T* dxp = dx + plane * h * w;
      for (int i = 0; i < oh; ++i) {
        const std::size_t q = plane * pq + static_cast<std::size_t>(i) * ow;
        pool_row_backward(ow, xp + 2 * i * w, xp + (2 * i + 1) * w, y + q, dy + q, argmax + q, mu,
                          c0, c1, k, dxp + 2 * i * w, dxp + (2 * i + 1) * w);
      }
    }
  }
}

template <class T>
void batchnorm_forward_eval(int c, std::size_t m, const T* x, const T* gamma, const T* beta,
                            const T* running_mean, const T* running_var, double eps, T* y) {
  for (int ch = 0; ch < c; ++ch) {
    const double invstd = 1.0 / std::sqrt(static_cast<double>(running_var[ch]) + eps);
    const T scale = static_cast<T>(gamma[ch] * invstd);
    const T shift = static_cast<T>(beta[ch] - running_mean[ch] * gamma[ch] * invstd);
    const T* xc = x + ch * m;
    T* yc = y + ch * m;
    for (std::size_t i = 0; i < m; ++i) yc[i] = xc[i] * scale + shift;
  }
}

template <class T>
void batchnorm_backward(int c, std::size_t m, const T* x, const T* dy, const T* gamma,
                        const T* save_mean, const T* save_invstd, T* dx, T* dgamma, T* dbeta) {
  for (int ch = 0; ch < c; ++ch) {
    const T* xc = x + ch * m;
    const T* dyc = dy + ch * m;
    T* dxc = dx + ch * m;
    const double mean = save_mean[ch];
    const double invstd = save_invstd[ch];
    double sum_dy = 0, sum_dy_xmu = 0;
    sum_dy_dyxmu(xc, dyc, m, mean, &sum_dy, &sum_dy_xmu);
    dbeta[ch] = static_cast<T>(sum_dy);
    dgamma[ch] = static_cast<T>(sum_dy_xmu * invstd);
    // dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy*xhat))
    const double md = static_cast<double>(m);
    const T k = static_cast<T>(gamma[ch] * invstd);
    const T a = static_cast<T>(sum_dy / md);
    const T bcoef = static_cast<T>(sum_dy_xmu * invstd * invstd / md);
    const T mu = static_cast<T>(mean);
    for (std::size_t i = 0; i < m; ++i) dxc[i] = k * (dyc[i] - a - (xc[i] - mu) * bcoef);
  }
}

template <class T>
void batchnorm_backward_eval(int c, std::size_t m, const T* x, const T* dy, const T* gamma,
                             const T* running_mean, const T* running_var, double eps, T* dx,
                             T* dgamma, T* dbeta) {
  for (int ch = 0; ch < c; ++ch) {
    const double invstd = 1.0 / std::sqrt(static_cast<double>(running_var[ch]) + eps);
    const T* xc = x + ch * m;
    const T* dyc = dy + ch * m;
    T* dxc = dx + ch * m;
    double sum_dy = 0, sum_dy_xhat = 0;
    const T k = static_cast<T>(gamma[ch] * invstd);
    for (std::size_t i = 0; i < m; ++i) {
      sum_dy += dyc[i];
      sum_dy_xhat += dyc[i] * (xc[i] - running_mean[ch]) * invstd;
      dxc[i] = dyc[i] * k;
    }
    dbeta[ch] = static_cast<T>(sum_dy);
    dgamma[ch] = static_cast<T>(sum_dy_xhat);
  }
}

template <class T>
void relu_forward(std::size_t n, const T* x, T* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}

template <class T>
void relu_backward(std::size_t n, const T* y, const T* dy, T* dx) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
}

template <class T>
void maxpool2x2_forward(std::size_t planes, int h, int w, const T* x, T* y, std::uint8_t* argmax) {
  const int oh = h / 2, ow = w / 2;
  for (std::size_t p = 0; p < planes; ++p) {
    const T* xp = x + p * h * w;
    T* yp = y + p * oh * ow;
    std::uint8_t* ap = argmax + p * oh * ow;
    for (int i = 0; i < oh; ++i) {
      const T* r0 = xp + (2 * i) * w;
      const T* r1 = r0 + w;
      for (int j = 0; j < ow; ++j) {
        T best = r0[2 * j];
        std::uint8_t at = 0;
        if (r0[2 * j + 1] > best) best = r0[2 * j + 1], at = 1;
        if (r1[2 * j] > best) best = r1[2 * j], at = 2;
        if (r1[2 * j + 1] > best) best = r1[2 * j + 1], at = 3;
        yp[i * ow + j] = best;
        ap[i * ow + j] = at;
      }
    }
  }
}

template <class T>
void maxpool2x2_backward(std::size_t planes, int h, int w, const T* dy, const std::uint8_t* argmax,
                         T* dx) {
  const int oh = h / 2, ow = w / 2;
  std::fill(dx, dx + planes * h * w, T(0));
  for (std::size_t p = 0; p < planes; ++p) {
    T* xp = dx + p * h * w;
    const T* dyp = dy + p * oh * ow;
    const std::uint8_t* ap = argmax + p * oh * ow;
    for (int i = 0; i < oh; ++i) {
      for (int j = 0; j < ow; ++j) {
        const std::uint8_t a = ap[i * ow + j];
        xp[(2 * i + (a >> 1)) * w + 2 * j + (a & 1)] = dyp[i * ow + j];
      }
    }
  }
}

template <class T>
void linear_forward(int n, int in, int out, const T* x, const T* w, const T* b, T* y) {
  gemm(false, true, n, out, in, T(1), x, in, w, in, T(0), y, out);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o) y[i * out + o] += b[o];
}

template <class T>
void linear_backward(int n, int in, int out, const T* x, const T* w, const T* dy, T* dx, T* dw,
                     T* db) {
  // dw[out][in] = dy[N][out]^T * x[N][in]
  gemm(true, false, out, in, n, T(1), dy, out, x, in, T(0), dw, in);
  for (int o = 0; o < out; ++o) {
    T s = 0;
    for (int i = 0; i < n; ++i) s += dy[i * out + o];
    db[o] = s;
  }
  // dx[N][in] = dy[N][out] * w[out][in]
  if (dx != nullptr) gemm(false, false, n, in, out, T(1), dy, out, w, in, T(0), dx, in);
}

template <class T>
double softmax_cross_entropy(int n, int classes, const T* logits, const std::int32_t* labels,
                             T* dlogits, double grad_scale) {
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const T* z = logits + static_cast<std::size_t>(i) * classes;
    double mx = z[0];
    for (int k = 1; k < classes; ++k) mx = std::max<double>(mx, z[k]);
    double sum = 0;
    for (int k = 0; k < classes; ++k) sum += std::exp(z[k] - mx);
    const double lse = mx + std::log(sum);
    total += lse - z[labels[i]];
    if (dlogits != nullptr) {
      T* d = dlogits + static_cast<std::size_t>(i) * classes;
      for (int k = 0; k < classes; ++k) {
        const double p = std::exp(z[k] - lse);
        d[k] = static_cast<T>((p - (k == labels[i] ? 1.0 : 0.0)) * grad_scale);
      }
    }
  }
  return total;
}

template <class T>
int topk_correct(int n, int classes, const T* logits, const std::int32_t* labels, int k) {
  int correct = 0;
  for (int i = 0; i < n; ++i) {
    const T* z = logits + static_cast<std::size_t>(i) * classes;
    const T target = z[labels[i]];
    int greater = 0;
    for (int j = 0; j < classes; ++j) greater += z[j] > target ? 1 : 0;
    correct += greater < k ? 1 : 0;
  }
  return correct;
}

template <class T>
void cnhw_to_nchw(int c, int n, int hw, const T* x, T* y) {
  for (int ch = 0; ch < c; ++ch)
    for (int i = 0; i < n; ++i)
      std::memcpy(y + (static_cast<std::size_t>(i) * c + ch) * hw,
                  x + (static_cast<std::size_t>(ch) * n + i) * hw, sizeof(T) * hw);
}

template <class T>
void nchw_to_cnhw(int c, int n, int hw, const T* x, T* y) {
  for (int ch = 0; ch < c; ++ch)
    for (int i = 0; i < n; ++i)
      std::memcpy(y + (static_cast<std::size_t>(ch) * n + i) * hw,
                  x + (static_cast<std::size_t>(i) * c + ch) * hw, sizeof(T) * hw);
}

template <class T>
void sgd_step(std::size_t n, T* p, const T* g, T* buf, const SgdParams& s, bool first_step) {
  const T lr = static_cast<T>(s.lr), mom = static_cast<T>(s.momentum);
  const T wd = static_cast<T>(s.weight_decay), damp = static_cast<T>(1.0 - s.dampening);
  for (std::size_t i = 0; i < n; ++i) {
    T d = g[i];
    if (wd != T(0)) d = d + wd * p[i];
    if (mom != T(0)) {
      buf[i] = first_step ? d : mom * buf[i] + damp * d;
      d = s.nesterov ? d + mom * buf[i] : buf[i];
    }
    p[i] = p[i] - lr * d;
  }
}

// Explicit instantiations: the definitions stay in this file; float is used by the model,
// double by the gradient checks.
template void conv2d_forward<float>(const ConvGeom&, const float*, const float*, const float*,
                                    float*, float*);
template void conv2d_backward_filter<float>(const ConvGeom&, const float*, const float*, float*,
                                            float*, float*);
template void conv2d_backward_data<float>(const ConvGeom&, const float*, const float*, float*,
                                          float*);
template void batchnorm_forward_train<float>(int, std::size_t, const float*, const float*,
                                             const float*, double, double, float*, float*, float*,
                                             float*, float*);
template void batchnorm_forward_eval<float>(int, std::size_t, const float*, const float*,
                                            const float*, const float*, const float*, double,
                                            float*);
template void batchnorm_backward<float>(int, std::size_t, const float*, const float*, const float*,
                                        const float*, const float*, float*, float*, float*);
template void batchnorm_backward_eval<float>(int, std::size_t, const float*, const float*,
                                             const float*, const float*, const float*, double,
                                             float*, float*, float*);
template void batchnorm_stats<float>(int, std::size_t, const float*, double, double, float*, float*,
                                     float*, float*, const BnSync*);
template void batchnorm_eval_stats<float>(int, const float*, const float*, double, float*, float*);
template void bn_relu_pool_forward<float>(int, int, int, int, const float*, const float*,
                                          const float*, const float*, const float*, float*,
                                          std::uint8_t*);
template void bn_relu_pool_backward<float>(int, int, int, int, const float*, const float*,
                                           const float*, const std::uint8_t*, const float*,
                                           const float*, const float*, bool, float*, float*, float*,
                                           const BnSync*);
template void relu_forward<float>(std::size_t, const float*, float*);
template void relu_backward<float>(std::size_t, const float*, const float*, float*);
template void maxpool2x2_forward<float>(std::size_t, int, int, const float*, float*, std::uint8_t*);
template void maxpool2x2_backward<float>(std::size_t, int, int, const float*, const std::uint8_t*,
                                         float*);
template void linear_forward<float>(int, int, int, const float*, const float*, const float*,
                                    float*);
template void linear_backward<float>(int, int, int, const float*, const float*, const float*,
                                     float*, float*, float*);
template double softmax_cross_entropy<float>(int, int, const float*, const std::int32_t*, float*,
                                             double);
template int topk_correct<float>(int, int, const float*, const std::int32_t*, int);
template void cnhw_to_nchw<float>(int, int, int, const float*, float*);
template void nchw_to_cnhw<float>(int, int, int, const float*, float*);
template void sgd_step<float>(std::size_t, float*, const float*, float*, const SgdParams&, bool);
template void conv2d_forward<double>(const ConvGeom&, const double*, const double*, const double*,
                                     double*, double*);
template void conv2d_backward_filter<double>(const ConvGeom&, const double*, const double*, double*,
                                             double*, double*);
template void conv2d_backward_data<double>(const ConvGeom&, const double*, const double*, double*,
                                           double*);
template void batchnorm_forward_train<double>(int, std::size_t, const double*, const double*,
                                              const double*, double, double, double*, double*,
                                              double*, double*, double*);
template void batchnorm_forward_eval<double>(int, std::size_t, const double*, const double*,
                                             const double*, const double*, const double*, double,
                                             double*);
template void batchnorm_backward<double>(int, std::size_t, const double*, const double*,
                                         const double*, const double*, const double*, double*,
                                         double*, double*);
template void batchnorm_backward_eval<double>(int, std::size_t, const double*, const double*,
                                              const double*, const double*, const double*, double,
                                              double*, double*, double*);
template void batchnorm_stats<double>(int, std::size_t, const double*, double, double, double*,
                                      double*, double*, double*, const BnSync*);
template void batchnorm_eval_stats<double>(int, const double*, const double*, double, double*,
                                           double*);
template void bn_relu_pool_forward<double>(int, int, int, int, const double*, const double*,
                                           const double*, const double*, const double*, double*,
                                           std::uint8_t*);
template void bn_relu_pool_backward<double>(int, int, int, int, const double*, const double*,
                                            const double*, const std::uint8_t*, const double*,
                                            const double*, const double*, bool, double*, double*,
                                            double*, const BnSync*);
template void relu_forward<double>(std::size_t, const double*, double*);
template void relu_backward<double>(std::size_t, const double*, const double*, double*);
template void maxpool2x2_forward<double>(std::size_t, int, int, const double*, double*,
                                         std::uint8_t*);
template void maxpool2x2_backward<double>(std::size_t, int, int, const double*, const std::uint8_t*,
                                          double*);
template void linear_forward<double>(int, int, int, const double*, const double*, const double*,
                                     double*);
template void linear_backward<double>(int, int, int, const double*, const double*, const double*,
                                      double*, double*, double*);
template double softmax_cross_entropy<double>(int, int, const double*, const std::int32_t*, double*,
                                              double);
template int topk_correct<double>(int, int, const double*, const std::int32_t*, int);
template void cnhw_to_nchw<double>(int, int, int, const double*, double*);
template void nchw_to_cnhw<double>(int, int, int, const double*, double*);
template void sgd_step<double>(std::size_t, double*, const double*, double*, const SgdParams&,
                               bool);

}  // namespace mnist_ddp::cpu
