// kernels.cu — the kernels of CudaOps and their launchers (kernels.cuh).
#include "ops/cuda/kernels.cuh"

#include <algorithm>

#include "mnist_ddp/data/dataset.hpp"  // kImagePixels

namespace mnist_ddp::kernels {

unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

int reduce_split(int c, long m) {
  const long by_fill = (kReduceBlocks + c - 1) / c;
  const long by_size = m / kThreads;
  return static_cast<int>(std::max(1L, std::min(by_fill, by_size)));
}

namespace {

// Block-wide sum of two doubles (blockDim.x == kThreads).
__device__ void block_sum2(double* a, double* b) {
  __shared__ double sa[kThreads], sb[kThreads];
  sa[threadIdx.x] = *a;
  sb[threadIdx.x] = *b;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      sa[threadIdx.x] += sa[threadIdx.x + s];
      sb[threadIdx.x] += sb[threadIdx.x + s];
    }
    __syncthreads();
  }
  *a = sa[0];
  *b = sb[0];
}

// The slice [lo, hi) of a channel's m values that block (blockIdx.x, .) of the split sums.
__device__ void block_slice(long m, long* lo, long* hi) {
  const long s = blockIdx.x, split = gridDim.x;
  *lo = m * s / split;
  *hi = m * (s + 1) / split;
}

// Block (s, ch) of x[N][C][HW]: partials[2 * (ch * split + s) + {0, 1}] = sum x, sum x^2 over its
// slice, in double.
__global__ void bn_partial_moments_kernel(int c, int n, int hw, const float* x, double* partials) {
  const int ch = blockIdx.y;
  long lo = 0, hi = 0;
  block_slice(static_cast<long>(n) * hw, &lo, &hi);
  double s = 0, ss = 0;
  for (long t = lo + threadIdx.x; t < hi; t += blockDim.x) {
    const long i = t / hw, q = t - i * hw;
    const double v = x[(i * c + ch) * hw + q];
    s += v;
    ss += v * v;
  }
  block_sum2(&s, &ss);
  if (threadIdx.x == 0) {
    const long at = 2 * (static_cast<long>(ch) * gridDim.x + blockIdx.x);
    partials[at] = s;
    partials[at + 1] = ss;
  }
}

// Channel ch's two sums: its split partials added in order.
__device__ void add_partials(const double* partials, int split, int ch, double* a, double* b) {
  double s = 0, ss = 0;
  for (int j = 0; j < split; ++j) {
    s += partials[2 * (ch * split + j)];
    ss += partials[2 * (ch * split + j) + 1];
  }
  *a = s;
  *b = ss;
}

// From a channel's moments over md values: the saved statistics and the running-statistics
// update (unbiased variance).
__device__ void finalize_channel(int ch, double mu, double var, double md, double eps,
                                 double momentum, float* mean, float* invstd, float* rm,
                                 float* rv) {
  mean[ch] = static_cast<float>(mu);
  invstd[ch] = static_cast<float>(1.0 / sqrt(var + eps));
  const double unbiased = md > 1 ? var * md / (md - 1) : var;
  rm[ch] = static_cast<float>((1 - momentum) * rm[ch] + momentum * mu);
  rv[ch] = static_cast<float>((1 - momentum) * rv[ch] + momentum * unbiased);
}

// One thread per channel: the batch mean and biased variance over md values from the partials,
// into moments[2 * ch + {0, 1}] (SyncBatchNorm: this rank's, for the host exchange) or straight
// into the statistics and the running-statistics update (moments == nullptr).
__global__ void bn_moments_kernel(int c, int split, const double* partials, double md, double eps,
                                  double momentum, double* moments, float* mean, float* invstd,
                                  float* rm, float* rv) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  double s = 0, ss = 0;
  add_partials(partials, split, ch, &s, &ss);
  const double mu = s / md;
  const double var = fmax(ss / md - mu * mu, 0.0);
  if (moments != nullptr) {
    moments[2 * ch] = mu;
    moments[2 * ch + 1] = var;
    return;
  }
  finalize_channel(ch, mu, var, md, eps, momentum, mean, invstd, rm, rv);
}

// SyncBatchNorm (--sync-bn): from the union batch's moments over md values per channel, the
// statistics (one thread per channel).
__global__ void bn_finalize_kernel(int c, const double* moments, double md, double eps,
                                   double momentum, float* mean, float* invstd, float* rm,
                                   float* rv) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  finalize_channel(ch, moments[2 * ch], moments[2 * ch + 1], md, eps, momentum, mean, invstd, rm,
                   rv);
}

__global__ void bn_eval_stats_kernel(int c, const float* rm, const float* rv, double eps,
                                     float* mean, float* invstd) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  mean[ch] = rm[ch];
  invstd[ch] = static_cast<float>(1.0 / sqrt(static_cast<double>(rv[ch]) + eps));
}

// One thread per pooled output of y[N][C][H/2][W/2].
__global__ void bn_relu_pool_fwd_kernel(int c, int n, int h, int w, const float* x,
                                        const float* gamma, const float* beta, const float* mean,
                                        const float* invstd, float* y, std::uint8_t* arg) {
  const int oh = h / 2, ow = w / 2;
  const long total = static_cast<long>(n) * c * oh * ow;
  const long t = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (t >= total) return;
  const int j = t % ow, i = (t / ow) % oh;
  const long plane = t / (static_cast<long>(oh) * ow);  // i_n * c + ch
  const int ch = plane % c;
  const double scd = static_cast<double>(gamma[ch]) * invstd[ch];
  const float sc = static_cast<float>(scd);
  const float sh = static_cast<float>(beta[ch] - static_cast<double>(mean[ch]) * scd);
  const float* p = x + plane * h * w + (2 * i) * w + 2 * j;
  const float a = p[0] * sc + sh, b = p[1] * sc + sh, cc = p[w] * sc + sh, d = p[w + 1] * sc + sh;
  // First maximum in row-major window order wins ties (PyTorch's rule).
  const float m01 = b > a ? b : a, m23 = d > cc ? d : cc;
  const int i01 = b > a ? 1 : 0, i23 = d > cc ? 3 : 2;
  const bool hi = m23 > m01;
  const float best = hi ? m23 : m01;
  y[t] = best > 0.f ? best : 0.f;
  arg[t] = static_cast<std::uint8_t>(hi ? i23 : i01);
}

// Block (s, ch), split like the moments: partials of sum g (relu-masked dy) and sum g*(x[argmax] -
// mean) over its slice of the pooled grid.
__global__ void bn_relu_pool_partials_kernel(int c, int n, int h, int w, const float* x,
                                             const float* y, const float* dy,
                                             const std::uint8_t* arg, const float* mean,
                                             double* partials) {
  const int ch = blockIdx.y, oh = h / 2, ow = w / 2;
  const long per = static_cast<long>(oh) * ow;
  long lo = 0, hi = 0;
  block_slice(n * per, &lo, &hi);
  double s1 = 0, s2 = 0;
  for (long t = lo + threadIdx.x; t < hi; t += blockDim.x) {
    const long i_n = t / per, r = t - i_n * per;
    const long q = (i_n * c + ch) * per + r;
    if (!(y[q] > 0.f)) continue;
    const int i = r / ow, j = r % ow, a = arg[q];
    const float xv = x[(i_n * c + ch) * h * w + (2 * i + (a >> 1)) * w + 2 * j + (a & 1)];
    s1 += dy[q];
    s2 += static_cast<double>(dy[q]) * (xv - mean[ch]);
  }
  block_sum2(&s1, &s2);
  if (threadIdx.x == 0) {
    const long at = 2 * (static_cast<long>(ch) * gridDim.x + blockIdx.x);
    partials[at] = s1;
    partials[at + 1] = s2;
  }
}

// One thread per channel: the two sums from the partials into sums[2 * ch + {0, 1}], and this
// rank's dgamma/dbeta from them.
__global__ void bn_grad_sums_kernel(int c, int split, const double* partials, const float* invstd,
                                    double* sums, float* dgamma, float* dbeta) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  double s1 = 0, s2 = 0;
  add_partials(partials, split, ch, &s1, &s2);
  sums[2 * ch] = s1;
  sums[2 * ch + 1] = s2;
  dbeta[ch] = static_cast<float>(s1);
  dgamma[ch] = static_cast<float>(s2 * invstd[ch]);
}

// One thread per pooled window: dx at its four positions.
__global__ void bn_relu_pool_dx_kernel(int c, int n, int h, int w, const float* x, const float* y,
                                       const float* dy, const std::uint8_t* arg, const float* gamma,
                                       const float* mean, const float* invstd, const double* sums,
                                       double md, bool batch_stats, float* dx) {
  const int oh = h / 2, ow = w / 2;
  const long total = static_cast<long>(n) * c * oh * ow;
  const long t = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (t >= total) return;
  const int j = t % ow, i = (t / ow) % oh;
  const long plane = t / (static_cast<long>(oh) * ow);
  const int ch = plane % c;
  const double is = invstd[ch];
  const float k = static_cast<float>(gamma[ch] * is);
  // Training BN: dx = c0 + (x - mu) * c1 + k*dy at the argmax; fixed statistics: k*dy only.
  const float c0 = batch_stats ? static_cast<float>(-k * sums[2 * ch] / md) : 0.f;
  const float c1 = batch_stats ? static_cast<float>(-k * sums[2 * ch + 1] * is * is / md) : 0.f;
  const float mu = mean[ch];
  const float g = y[t] > 0.f ? k * dy[t] : 0.f;
  const int a = arg[t];
  const float* xp = x + plane * h * w + (2 * i) * w + 2 * j;
  float* dp = dx + plane * h * w + (2 * i) * w + 2 * j;
  dp[0] = c0 + (xp[0] - mu) * c1 + (a == 0 ? g : 0.f);
  dp[1] = c0 + (xp[1] - mu) * c1 + (a == 1 ? g : 0.f);
  dp[w] = c0 + (xp[w] - mu) * c1 + (a == 2 ? g : 0.f);
  dp[w + 1] = c0 + (xp[w + 1] - mu) * c1 + (a == 3 ? g : 0.f);
}

__global__ void add_row_bias_kernel(int n, int out, const float* b, float* y) {
  const long t = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (t < static_cast<long>(n) * out) y[t] += b[t % out];
}

__global__ void column_sums_kernel(int n, int out, const float* dy, float* db) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= out) return;
  float s = 0;
  for (int i = 0; i < n; ++i) s += dy[static_cast<long>(i) * out + o];
  db[o] = s;
}

// One thread per row: loss, gradient and top-k counts (k = 1 and 5 together).
__global__ void softmax_xent_kernel(int n, int classes, const float* z, const std::int32_t* labels,
                                    float* dz, double grad_scale, double* loss, int* top1,
                                    int* top5, const float* loss_scale) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float* zi = z + static_cast<long>(i) * classes;
  double mx = zi[0];
  for (int k = 1; k < classes; ++k) mx = fmax(mx, static_cast<double>(zi[k]));
  double sum = 0;
  for (int k = 0; k < classes; ++k) sum += exp(zi[k] - mx);
  const double lse = mx + log(sum);
  const int label = labels[i];
  atomicAdd(loss, lse - zi[label]);
  int greater = 0;
  for (int k = 0; k < classes; ++k) greater += zi[k] > zi[label] ? 1 : 0;
  if (greater < 1) atomicAdd(top1, 1);
  if (greater < 5) atomicAdd(top5, 1);
  if (dz != nullptr) {
    // --amp fp16: the gradient of the scaled loss (the scale lives on the device).
    if (loss_scale != nullptr) grad_scale *= static_cast<double>(*loss_scale);
    for (int k = 0; k < classes; ++k) {
      const double p = exp(zi[k] - lse);
      dz[static_cast<long>(i) * classes + k] =
          static_cast<float>((p - (k == label ? 1.0 : 0.0)) * grad_scale);
    }
  }
}

// at != nullptr: lr and the first-step flag come from device memory (a captured step).
// pending != nullptr (--amp fp16): 1 while every step so far was skipped, so this is still the
// optimizer's first update (track_first_update_kernel keeps it).
__global__ void sgd_kernel(std::size_t n, float* p, const float* g, float* buf, float lr, float mom,
                           float damp, float wd, bool nesterov, bool first, const DeviceScalars* at,
                           const float* skip, const int* pending) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  // --amp fp16: a step whose gradients held inf/NaN (on any rank) changes nothing.
  if (skip != nullptr && *skip != 0.f) return;
  if (at != nullptr) {
    lr = at->lr;
    first = at->first_step != 0 || (pending != nullptr && *pending != 0);
  }
  float d = g[i];
  if (wd != 0.f) d = d + wd * p[i];
  if (mom != 0.f) {
    buf[i] = first ? d : mom * buf[i] + damp * d;
    d = nesterov ? d + mom * buf[i] : buf[i];
  }
  p[i] = p[i] - lr * d;
}

// After sgd_kernel under --amp fp16 (one thread): a skipped step is no update, so when this step
// was the first update and was skipped, the next one is the first again. PyTorch's rule: the
// momentum buffer starts as the gradient at the first step that actually updates.
__global__ void track_first_update_kernel(const DeviceScalars* at, const float* skip,
                                          int* pending) {
  const bool first = at->first_step != 0 || *pending != 0;
  *pending = first && *skip != 0.f ? 1 : 0;
}

// One thread per pixel of the batch: x[b][p] = image[order[offset+b]][p] * a + c.
// at != nullptr: the offset comes from device memory (a captured step).
__global__ void gather_kernel(const std::uint8_t* images, const std::uint8_t* labels,
                              const std::int64_t* order, std::int64_t offset, int n, float a,
                              float c, float* x, std::int32_t* y, const DeviceScalars* at) {
  const long t = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (t >= static_cast<long>(n) * kImagePixels) return;
  if (at != nullptr) offset = at->offset;
  const long b = t / kImagePixels, p = t % kImagePixels;
  const std::int64_t idx = order[offset + b];
  x[t] = static_cast<float>(images[idx * kImagePixels + p]) * a + c;
  if (p == 0) y[b] = labels[idx];
}

// ---- mixed precision (--amp): fp32 <-> 16-bit copies
// ---------------------------------------------

__device__ __half to16(float v, __half*) {
  return __float2half_rn(v);
}
__device__ __nv_bfloat16 to16(float v, __nv_bfloat16*) {
  return __float2bfloat16_rn(v);
}
__device__ float from16(__half v) {
  return __half2float(v);
}
__device__ float from16(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// y[i] = x[i] rounded to nearest even in T (fp16 overflows to inf, which the scaler catches).
template <typename T>
__global__ void to16_kernel(std::size_t n, const float* x, T* y) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = to16(x[i], static_cast<T*>(nullptr));
}
template <typename T>
__global__ void from16_kernel(std::size_t n, const T* x, float* y) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = from16(x[i]);
}
__global__ void add_into_kernel(std::size_t n, const float* x, float* y) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] += x[i];
}
// PyTorch's fp16/bf16 compress hook, encode: h = T(float(T(g)) / divisor) (the cast, then the
// division in 16 bits: computed in fp32, rounded to T).
template <typename T>
__global__ void encode_half_kernel(std::size_t n, const float* g, T* h, float divisor) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n)
    h[i] = to16(from16(to16(g[i], static_cast<T*>(nullptr))) / divisor, static_cast<T*>(nullptr));
}

}  // namespace

void launch_bn_partial_moments(dim3 grid, cudaStream_t stream, int c, int n, int hw, const float* x,
                               double* partials) {
  bn_partial_moments_kernel<<<grid, kThreads, 0, stream>>>(c, n, hw, x, partials);
}

void launch_bn_moments(dim3 grid, cudaStream_t stream, int c, int split, const double* partials,
                       double md, double eps, double momentum, double* moments, float* mean,
                       float* invstd, float* rm, float* rv) {
  bn_moments_kernel<<<grid, kThreads, 0, stream>>>(c, split, partials, md, eps, momentum, moments,
                                                   mean, invstd, rm, rv);
}

void launch_bn_finalize(dim3 grid, cudaStream_t stream, int c, const double* moments, double md,
                        double eps, double momentum, float* mean, float* invstd, float* rm,
                        float* rv) {
  bn_finalize_kernel<<<grid, kThreads, 0, stream>>>(c, moments, md, eps, momentum, mean, invstd, rm,
                                                    rv);
}

void launch_bn_eval_stats(dim3 grid, cudaStream_t stream, int c, const float* rm, const float* rv,
                          double eps, float* mean, float* invstd) {
  bn_eval_stats_kernel<<<grid, kThreads, 0, stream>>>(c, rm, rv, eps, mean, invstd);
}

void launch_bn_relu_pool_fwd(dim3 grid, cudaStream_t stream, int c, int n, int h, int w,
                             const float* x, const float* gamma, const float* beta,
                             const float* mean, const float* invstd, float* y, std::uint8_t* arg) {
  bn_relu_pool_fwd_kernel<<<grid, kThreads, 0, stream>>>(c, n, h, w, x, gamma, beta, mean, invstd,
                                                         y, arg);
}

void launch_bn_relu_pool_partials(dim3 grid, cudaStream_t stream, int c, int n, int h, int w,
                                  const float* x, const float* y, const float* dy,
                                  const std::uint8_t* arg, const float* mean, double* partials) {
  bn_relu_pool_partials_kernel<<<grid, kThreads, 0, stream>>>(c, n, h, w, x, y, dy, arg, mean,
                                                              partials);
}

void launch_bn_grad_sums(dim3 grid, cudaStream_t stream, int c, int split, const double* partials,
                         const float* invstd, double* sums, float* dgamma, float* dbeta) {
  bn_grad_sums_kernel<<<grid, kThreads, 0, stream>>>(c, split, partials, invstd, sums, dgamma,
                                                     dbeta);
}

void launch_bn_relu_pool_dx(dim3 grid, cudaStream_t stream, int c, int n, int h, int w,
                            const float* x, const float* y, const float* dy,
                            const std::uint8_t* arg, const float* gamma, const float* mean,
                            const float* invstd, const double* sums, double md, bool batch_stats,
                            float* dx) {
  bn_relu_pool_dx_kernel<<<grid, kThreads, 0, stream>>>(c, n, h, w, x, y, dy, arg, gamma, mean,
                                                        invstd, sums, md, batch_stats, dx);
}

void launch_add_row_bias(dim3 grid, cudaStream_t stream, int n, int out, const float* b, float* y) {
  add_row_bias_kernel<<<grid, kThreads, 0, stream>>>(n, out, b, y);
}

void launch_column_sums(dim3 grid, cudaStream_t stream, int n, int out, const float* dy,
                        float* db) {
  column_sums_kernel<<<grid, kThreads, 0, stream>>>(n, out, dy, db);
}

void launch_softmax_xent(dim3 grid, cudaStream_t stream, int n, int classes, const float* z,
                         const std::int32_t* labels, float* dz, double grad_scale, double* loss,
                         int* top1, int* top5, const float* loss_scale) {
  softmax_xent_kernel<<<grid, kThreads, 0, stream>>>(n, classes, z, labels, dz, grad_scale, loss,
                                                     top1, top5, loss_scale);
}

void launch_sgd(dim3 grid, cudaStream_t stream, std::size_t n, float* p, const float* g, float* buf,
                float lr, float mom, float damp, float wd, bool nesterov, bool first,
                const DeviceScalars* at, const float* skip, const int* pending) {
  sgd_kernel<<<grid, kThreads, 0, stream>>>(n, p, g, buf, lr, mom, damp, wd, nesterov, first, at,
                                            skip, pending);
}

void launch_track_first_update(cudaStream_t stream, const DeviceScalars* at, const float* skip,
                               int* pending) {
  track_first_update_kernel<<<1, 1, 0, stream>>>(at, skip, pending);
}

void launch_gather_batch(dim3 grid, cudaStream_t stream, const std::uint8_t* images,
                         const std::uint8_t* labels, const std::int64_t* order, std::int64_t offset,
                         int n, float a, float c, float* x, std::int32_t* y,
                         const DeviceScalars* at) {
  gather_kernel<<<grid, kThreads, 0, stream>>>(images, labels, order, offset, n, a, c, x, y, at);
}

void launch_to16(dim3 grid, cudaStream_t stream, std::size_t n, const float* x, __half* y) {
  to16_kernel<<<grid, kThreads, 0, stream>>>(n, x, y);
}

void launch_to16(dim3 grid, cudaStream_t stream, std::size_t n, const float* x, __nv_bfloat16* y) {
  to16_kernel<<<grid, kThreads, 0, stream>>>(n, x, y);
}

void launch_from16(dim3 grid, cudaStream_t stream, std::size_t n, const __half* x, float* y) {
  from16_kernel<<<grid, kThreads, 0, stream>>>(n, x, y);
}

void launch_from16(dim3 grid, cudaStream_t stream, std::size_t n, const __nv_bfloat16* x,
                   float* y) {
  from16_kernel<<<grid, kThreads, 0, stream>>>(n, x, y);
}

void launch_add_into(dim3 grid, cudaStream_t stream, std::size_t n, const float* x, float* y) {
  add_into_kernel<<<grid, kThreads, 0, stream>>>(n, x, y);
}

void launch_encode_half(dim3 grid, cudaStream_t stream, std::size_t n, const float* g, __half* h,
                        float divisor) {
  encode_half_kernel<<<grid, kThreads, 0, stream>>>(n, g, h, divisor);
}

void launch_encode_half(dim3 grid, cudaStream_t stream, std::size_t n, const float* g,
                        __nv_bfloat16* h, float divisor) {
  encode_half_kernel<<<grid, kThreads, 0, stream>>>(n, g, h, divisor);
}

}  // namespace mnist_ddp::kernels
