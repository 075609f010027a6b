// kernels.cuh — CudaOps' own kernels (cuda_ops.hpp is the class; kernels.cu holds the kernels),
// each behind a host launcher that takes the grid and the stream: BN statistics (split
// deterministic reductions), the fused BN -> ReLU -> maxpool forward and backward, the fc bias and
// its gradient, softmax cross-entropy with top-1/top-5, SGD, the batch gather from the
// device-resident dataset, and the fp32 <-> 16-bit copies of --amp and the 16-bit hooks. Every
// launcher that takes a grid runs kThreads threads per block (the reductions size their shared
// memory by it); launch_track_first_update runs one thread.
// Private to src/ops/cuda/.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mnist_ddp::kernels {

inline constexpr int kThreads = 256;
// Blocks of kThreads for n threads.
unsigned blocks_for(std::size_t n);

// The BN reductions (per-channel sums over N*H*W values) run split: grid (split, C), block (s, ch)
// sums its contiguous slice of the channel, and a one-thread-per-channel kernel adds the split's
// partials in order. One block per channel kept 16-32 of the H100's 132 SMs busy, each thread
// walking hundreds of dependent loads (first GPU run: the layer spans of the trace were 70-180 us
// at batch 100). The partition depends only on the shape, so the sums stay deterministic.
inline constexpr int kReduceBlocks = 512;  // blocks over all channels: a few per SM
inline constexpr int kMaxPartials =
    1024;  // C * split held by the partials scratch (C <= 64: <= 575)

// Blocks per channel for m values per channel: enough to fill the GPU, none with fewer than
// kThreads values (one block when m < kThreads).
int reduce_split(int c, long m);

// The per-step values a captured step reads at replay time (Ops::StepScalars on the device).
struct DeviceScalars {
  std::int64_t offset;
  float lr;
  int first_step;
};

// Block (s, ch) of x[N][C][HW]: partials[2 * (ch * split + s) + {0, 1}] = sum x, sum x^2 over its
// slice, in double.
void launch_bn_partial_moments(dim3 grid, cudaStream_t stream, int c, int n, int hw, const float* x,
                               double* partials);
// One thread per channel: the batch mean and biased variance over md values from the partials,
// into moments[2 * ch + {0, 1}] (SyncBatchNorm: this rank's, for the host exchange) or straight
// into the statistics and the running-statistics update (moments == nullptr).
void launch_bn_moments(dim3 grid, cudaStream_t stream, int c, int split, const double* partials,
                       double md, double eps, double momentum, double* moments, float* mean,
                       float* invstd, float* rm, float* rv);
// SyncBatchNorm (--sync-bn): from the union batch's moments over md values per channel, the
// statistics (one thread per channel).
void launch_bn_finalize(dim3 grid, cudaStream_t stream, int c, const double* moments, double md,
                        double eps, double momentum, float* mean, float* invstd, float* rm,
                        float* rv);
void launch_bn_eval_stats(dim3 grid, cudaStream_t stream, int c, const float* rm, const float* rv,
                          double eps, float* mean, float* invstd);
// One thread per pooled output of y[N][C][H/2][W/2].
void launch_bn_relu_pool_fwd(dim3 grid, cudaStream_t stream, int c, int n, int h, int w,
                             const float* x, const float* gamma, const float* beta,
                             const float* mean, const float* invstd, float* y, std::uint8_t* arg);
// Block (s, ch), split like the moments: partials of sum g (relu-masked dy) and sum g*(x[argmax] -
// mean) over its slice of the pooled grid.
void launch_bn_relu_pool_partials(dim3 grid, cudaStream_t stream, int c, int n, int h, int w,
                                  const float* x, const float* y, const float* dy,
                                  const std::uint8_t* arg, const float* mean, double* partials);
// One thread per channel: the two sums from the partials into sums[2 * ch + {0, 1}], and this
// rank's dgamma/dbeta from them.
void launch_bn_grad_sums(dim3 grid, cudaStream_t stream, int c, int split, const double* partials,
                         const float* invstd, double* sums, float* dgamma, float* dbeta);
// One thread per pooled window: dx at its four positions.
void launch_bn_relu_pool_dx(dim3 grid, cudaStream_t stream, int c, int n, int h, int w,
                            const float* x, const float* y, const float* dy,
                            const std::uint8_t* arg, const float* gamma, const float* mean,
                            const float* invstd, const double* sums, double md, bool batch_stats,
                            float* dx);
void launch_add_row_bias(dim3 grid, cudaStream_t stream, int n, int out, const float* b, float* y);
void launch_column_sums(dim3 grid, cudaStream_t stream, int n, int out, const float* dy, float* db);
// One thread per row: loss, gradient and top-k counts (k = 1 and 5 together).
void launch_softmax_xent(dim3 grid, cudaStream_t stream, int n, int classes, const float* z,
                         const std::int32_t* labels, float* dz, double grad_scale, double* loss,
                         int* top1, int* top5, const float* loss_scale);
// at != nullptr: lr and the first-step flag come from device memory (a captured step).
// pending != nullptr (--amp fp16): 1 while every step so far was skipped, so this is still the
// optimizer's first update (track_first_update_kernel keeps it).
void launch_sgd(dim3 grid, cudaStream_t stream, std::size_t n, float* p, const float* g, float* buf,
                float lr, float mom, float damp, float wd, bool nesterov, bool first,
                const DeviceScalars* at, const float* skip, const int* pending);
// After sgd_kernel under --amp fp16 (one thread): a skipped step is no update, so when this step
// was the first update and was skipped, the next one is the first again. PyTorch's rule: the
// momentum buffer starts as the gradient at the first step that actually updates.
void launch_track_first_update(cudaStream_t stream, const DeviceScalars* at, const float* skip,
                               int* pending);
// One thread per pixel of the batch: x[b][p] = image[order[offset+b]][p] * a + c.
// at != nullptr: the offset comes from device memory (a captured step).
void launch_gather_batch(dim3 grid, cudaStream_t stream, const std::uint8_t* images,
                         const std::uint8_t* labels, const std::int64_t* order, std::int64_t offset,
                         int n, float a, float c, float* x, std::int32_t* y,
                         const DeviceScalars* at);
// y[i] = x[i] rounded to nearest even in T (fp16 overflows to inf, which the scaler catches).
void launch_to16(dim3 grid, cudaStream_t stream, std::size_t n, const float* x, __half* y);
void launch_to16(dim3 grid, cudaStream_t stream, std::size_t n, const float* x, __nv_bfloat16* y);
void launch_from16(dim3 grid, cudaStream_t stream, std::size_t n, const __half* x, float* y);
void launch_from16(dim3 grid, cudaStream_t stream, std::size_t n, const __nv_bfloat16* x, float* y);
void launch_add_into(dim3 grid, cudaStream_t stream, std::size_t n, const float* x, float* y);
// PyTorch's fp16/bf16 compress hook, encode: h = T(float(T(g)) / divisor) (the cast, then the
// division in 16 bits: computed in fp32, rounded to T).
void launch_encode_half(dim3 grid, cudaStream_t stream, std::size_t n, const float* g, __half* h,
                        float divisor);
void launch_encode_half(dim3 grid, cudaStream_t stream, std::size_t n, const float* g,
                        __nv_bfloat16* h, float divisor);

}  // namespace mnist_ddp::kernels
