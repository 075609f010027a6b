// direct_conv.cu — the one-input-channel direct convolution kernels and their launchers
// (direct_conv.cuh).
#include "ops/cuda/direct_conv.cuh"

#include <algorithm>

#include "ops/cuda/kernels.cuh"  // kThreads, kReduceBlocks

namespace mnist_ddp::kernels {

namespace {

constexpr int kFwdChannels =
    4;                   // output channels per forward block: grid (N, K/4), 400 at batch 100
constexpr int kRun = 4;  // outputs along a row per thread (inputs reused from registers)
constexpr int kWgradImages = 4;  // images per shared-memory load of the weight gradient
constexpr std::size_t kSharedLimit = 48 * 1024;  // bytes a block may use without opting in
// Zeroed floats after the padded image(s) in shared memory. A thread reads a row segment of
// kRun + R - 1 floats from a run's start (rounded up to whole float4s when rows are 16-byte
// aligned): at the right edge up to 5 floats (R = 3) past its row, into the next row or image, or
// on the last row into this margin. Those values only reach outputs that are not stored or
// pixels whose gradient is 0.
constexpr int kMargin = 8;

__host__ __device__ int padded_floats(int h, int w, int pad) {
  return (h + 2 * pad) * (w + 2 * pad);
}

// Images [i0, i0 + cnt) of x[N][H][W], zero-padded, into xs[cnt][(H + 2 pad)][(W + 2 pad)], and
// kMargin zeros after them (the whole block).
__device__ void load_padded(const float* x, int i0, int cnt, int h, int w, int pad, float* xs) {
  const int pw = w + 2 * pad, size = padded_floats(h, w, pad);
  const float* xi = x + static_cast<long>(i0) * h * w;
  for (int t = threadIdx.x; t < cnt * size + kMargin; t += blockDim.x) {
    const int img = t / size, p = t - img * size;
    const int row = p / pw - pad, col = p % pw - pad;
    xs[t] = img < cnt && row >= 0 && row < h && col >= 0 && col < w
                ? xi[static_cast<long>(img) * h * w + row * w + col]
                : 0.f;
  }
}

// The kRun + R - 1 floats of a row segment into registers: whole float4s when vec (the padded
// width is a multiple of 4, so every run starts 16-byte aligned: fewer shared-memory loads, and
// no 4-way bank conflicts between neighbouring runs), else one float at a time.
template <int R>
__device__ __forceinline__ void load_segment(const float* row, bool vec,
                                             float (&in)[kRun + R - 1]) {
  constexpr int kSeg = kRun + R - 1;
  if (vec) {
#pragma unroll
    for (int q = 0; q < (kSeg + 3) / 4; ++q) {
      const float4 f = reinterpret_cast<const float4*>(row)[q];
      const float part[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (4 * q + e < kSeg) in[4 * q + e] = part[e];
    }
  } else {
#pragma unroll
    for (int j = 0; j < kSeg; ++j) in[j] = row[j];
  }
}

// Block (image, channel group): y for kFwdChannels output channels of one image. A thread computes
// kRun neighbouring outputs of a row at a time, each input row segment read once from shared
// memory into registers. Shared: the padded image, then the group's taps.
// moments != nullptr: also the BatchNorm partial moments of y, in the layout of
// launch_bn_moments' partials with split N: moments[2 * (channel * N + image) + {0, 1}] = sum y,
// sum y^2 over the image's plane, in double (each thread's sums, then the block's in a fixed
// order).
template <int R>
__global__ void direct_conv_fwd_kernel(int n, int k, int h, int w, int pad, const float* x,
                                       const float* wt, const float* b, float* y, double* moments) {
  constexpr int kSums = 2 * kFwdChannels;
  __shared__ double warp_sums[kThreads / 32][kSums];
  extern __shared__ __align__(16) float shared[];
  const int pw = w + 2 * pad, oh = h + 2 * pad - R + 1, ow = pw - R + 1, plane = oh * ow;
  const int runs = (ow + kRun - 1) / kRun, per_channel = oh * runs;
  const bool vec = pw % 4 == 0;
  const int i = blockIdx.x, k0 = blockIdx.y * kFwdChannels, kc = min(kFwdChannels, k - k0);
  float* xs = shared;                                       // [(H + 2 pad) * (W + 2 pad) + kMargin]
  float* ws = shared + padded_floats(h, w, pad) + kMargin;  // [kc][R][R]
  load_padded(x, i, 1, h, w, pad, xs);
  for (int t = threadIdx.x; t < kc * R * R; t += blockDim.x) ws[t] = wt[k0 * R * R + t];
  // Sync: the image and taps are in shared memory before any thread reads them.
  __syncthreads();
  double sums[kSums];  // [2 * kk + {0, 1}]: this thread's sum y, sum y^2 of channel k0 + kk
#pragma unroll
  for (int j = 0; j < kSums; ++j) sums[j] = 0;
  for (int t = threadIdx.x; t < kc * per_channel; t += blockDim.x) {
    const int kk = t / per_channel, rest = t - kk * per_channel, oy = rest / runs;
    const int ox0 = (rest - oy * runs) * kRun;
    const float* tap = ws + kk * R * R;
    float acc[kRun];
#pragma unroll
    for (int v = 0; v < kRun; ++v) acc[v] = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float in[kRun + R - 1];
      load_segment<R>(xs + (oy + r) * pw + ox0, vec, in);
#pragma unroll
      for (int s = 0; s < R; ++s) {
        const float tw = tap[r * R + s];
#pragma unroll
        for (int v = 0; v < kRun; ++v) acc[v] = fmaf(tw, in[v + s], acc[v]);
      }
    }
    float* out = y + (static_cast<long>(i) * k + k0 + kk) * plane + oy * ow + ox0;
    const float bias = b[k0 + kk];
    double s1 = 0, s2 = 0;
#pragma unroll
    for (int v = 0; v < kRun; ++v)
      if (ox0 + v < ow) {
        const float o = acc[v] + bias;
        out[v] = o;
        s1 += o;
        s2 += static_cast<double>(o) * o;
      }
#pragma unroll
    for (int j = 0; j < kFwdChannels; ++j)
      if (j == kk) sums[2 * j] += s1, sums[2 * j + 1] += s2;  // registers: no dynamic index
  }
  if (moments == nullptr) return;  // uniform over the block: no thread skips a barrier alone
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < kSums; ++j) {
    double v = sums[j];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) warp_sums[warp][j] = v;
  }
  // Sync: every warp's sums are in shared memory before they are added.
  __syncthreads();
  if (threadIdx.x < 2 * kc) {
    double v = 0;
    for (int q = 0; q < kThreads / 32; ++q) v += warp_sums[q][threadIdx.x];
    const int kk = threadIdx.x / 2;
    moments[2 * (static_cast<long>(k0 + kk) * n + i) + (threadIdx.x & 1)] = v;
  }
}

// Block (s, channel): the R*R taps' and the bias's gradient summed over its slice of the images,
// into partials[(channel * split + s) * (R*R + 1)]. The slice is loaded kWgradImages images at a
// time; a thread takes kRun neighbouring outputs of a row at a time (their dy and each input row
// segment in registers) and keeps the R*R + 1 sums in registers; the block then adds them in a
// fixed order (warp shuffles, then the warps in turn), so the result depends only on the shape.
template <int R>
__global__ void direct_conv_wgrad_kernel(int n, int k, int h, int w, int pad, const float* x,
                                         const float* dy, float* partials) {
  constexpr int kTaps = R * R + 1;
  constexpr int kWarps = kThreads / 32;
  extern __shared__ __align__(
      16) float xs[];  // [kWgradImages][(H + 2 pad) * (W + 2 pad)] + kMargin
  __shared__ float warp_sums[kWarps][kTaps];
  const int pw = w + 2 * pad, oh = h + 2 * pad - R + 1, ow = pw - R + 1, plane = oh * ow;
  const bool vec = pw % 4 == 0;  // then size is a multiple of 4 too: every image stays aligned
  const int runs = (ow + kRun - 1) / kRun, per_image = oh * runs, size = padded_floats(h, w, pad);
  const int ch = blockIdx.y, split = gridDim.x;
  const int lo = static_cast<int>(static_cast<long>(n) * blockIdx.x / split);
  const int hi = static_cast<int>(static_cast<long>(n) * (blockIdx.x + 1) / split);
  float acc[kTaps];
#pragma unroll
  for (int j = 0; j < kTaps; ++j) acc[j] = 0.f;
  for (int i0 = lo; i0 < hi; i0 += kWgradImages) {
    const int cnt = min(kWgradImages, hi - i0);
    // Sync: every thread is done with the previous images before they are overwritten.
    __syncthreads();
    load_padded(x, i0, cnt, h, w, pad, xs);
    // Sync: the images are in shared memory before any thread reads them.
    __syncthreads();
    for (int t = threadIdx.x; t < cnt * per_image; t += blockDim.x) {
      const int img = t / per_image, rest = t - img * per_image, oy = rest / runs;
      const int ox0 = (rest - oy * runs) * kRun;
      const float* d = dy + (static_cast<long>(i0 + img) * k + ch) * plane + oy * ow + ox0;
      float g[kRun];
#pragma unroll
      for (int v = 0; v < kRun; ++v) g[v] = ox0 + v < ow ? d[v] : 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float in[kRun + R - 1];
        load_segment<R>(xs + img * size + (oy + r) * pw + ox0, vec, in);
#pragma unroll
        for (int s = 0; s < R; ++s)
#pragma unroll
          for (int v = 0; v < kRun; ++v) acc[r * R + s] = fmaf(g[v], in[v + s], acc[r * R + s]);
      }
#pragma unroll
      for (int v = 0; v < kRun; ++v) acc[R * R] += g[v];
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < kTaps; ++j) {
    float v = acc[j];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) warp_sums[warp][j] = v;
  }
  // Sync: every warp's sums are in shared memory before they are added.
  __syncthreads();
  if (threadIdx.x < kTaps) {
    float s = 0.f;
    for (int v = 0; v < kWarps; ++v) s += warp_sums[v][threadIdx.x];
    partials[(static_cast<long>(ch) * split + blockIdx.x) * kTaps + threadIdx.x] = s;
  }
}

// One thread per (channel, tap): the split's partials added in order, in double; tap R*R is the
// bias.
__global__ void direct_conv_wgrad_finish_kernel(int k, int taps, int split, const float* partials,
                                                float* dw, float* db) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= k * taps) return;
  const int ch = t / taps, j = t - ch * taps;
  double s = 0;
  for (int v = 0; v < split; ++v) s += partials[(static_cast<long>(ch) * split + v) * taps + j];
  if (j < taps - 1)
    dw[ch * (taps - 1) + j] = static_cast<float>(s);
  else
    db[ch] = static_cast<float>(s);
}

// Shared memory of each kernel: the padded image(s) and the over-read margin, plus the forward's
// taps or the weight gradient's (static) per-warp sums.
std::size_t fwd_dynamic_bytes(int h, int w, int r, int pad) {
  return sizeof(float) *
         (static_cast<std::size_t>(padded_floats(h, w, pad)) + kMargin + kFwdChannels * r * r);
}
std::size_t fwd_shared_bytes(int h, int w, int r, int pad) {
  return fwd_dynamic_bytes(h, w, r, pad) + sizeof(double) * (kThreads / 32) * 2 * kFwdChannels;
}
std::size_t wgrad_dynamic_bytes(int h, int w, int pad) {
  return sizeof(float) *
         (static_cast<std::size_t>(kWgradImages) * padded_floats(h, w, pad) + kMargin);
}
std::size_t wgrad_shared_bytes(int h, int w, int r, int pad) {
  return wgrad_dynamic_bytes(h, w, pad) + sizeof(float) * (kThreads / 32) * (r * r + 1);
}

}  // namespace

bool direct_conv_supported(int c, int k, int h, int w, int r, int pad) {
  return c == 1 && (r == 3 || r == 5) && pad >= 0 && h + 2 * pad >= r && w + 2 * pad >= r &&
         k <= 65535 && fwd_shared_bytes(h, w, r, pad) <= kSharedLimit &&
         wgrad_shared_bytes(h, w, r, pad) <= kSharedLimit;
}

int direct_conv_wgrad_split(int n, int k) {
  return std::max(1, std::min(n, kReduceBlocks / std::max(1, k)));
}

std::size_t direct_conv_wgrad_partials(int n, int k, int r) {
  return static_cast<std::size_t>(k) * direct_conv_wgrad_split(n, k) * (r * r + 1);
}

void launch_direct_conv_fwd(cudaStream_t stream, int n, int k, int h, int w, int r, int pad,
                            const float* x, const float* wt, const float* b, float* y,
                            double* moments) {
  const dim3 grid(n, (k + kFwdChannels - 1) / kFwdChannels);
  const std::size_t shared = fwd_dynamic_bytes(h, w, r, pad);
  if (r == 3)
    direct_conv_fwd_kernel<3>
        <<<grid, kThreads, shared, stream>>>(n, k, h, w, pad, x, wt, b, y, moments);
  else
    direct_conv_fwd_kernel<5>
        <<<grid, kThreads, shared, stream>>>(n, k, h, w, pad, x, wt, b, y, moments);
}

void launch_direct_conv_wgrad(cudaStream_t stream, int n, int k, int h, int w, int r, int pad,
                              const float* x, const float* dy, float* partials, float* dw,
                              float* db) {
  const int split = direct_conv_wgrad_split(n, k);
  const dim3 grid(split, k);
  const std::size_t shared = wgrad_dynamic_bytes(h, w, pad);
  if (r == 3)
    direct_conv_wgrad_kernel<3>
        <<<grid, kThreads, shared, stream>>>(n, k, h, w, pad, x, dy, partials);
  else
    direct_conv_wgrad_kernel<5>
        <<<grid, kThreads, shared, stream>>>(n, k, h, w, pad, x, dy, partials);
  const int taps = r * r + 1;
  direct_conv_wgrad_finish_kernel<<<blocks_for(static_cast<std::size_t>(k) * taps), kThreads, 0,
                                    stream>>>(k, taps, split, partials, dw, db);
}

}  // namespace mnist_ddp::kernels
