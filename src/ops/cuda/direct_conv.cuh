// direct_conv.cuh — direct convolution kernels for one input channel (the ConvNet's layer1: 1 -> 16
// channels, 5x5, pad 2, on 28x28 images), used by CudaOps in place of cuDNN for fp32 data. At
// batch 100 cuDNN spent 35 us (forward) and 70 us (weight gradient) on 63 MFLOP each (first GPU
// run, bench/results/2026-11-26-gpu-first-h100.md): its kernels are sized for large problems.
// Here each block keeps one zero-padded image in shared memory and the taps in registers; the
// weight gradient is reduced split over the batch with the partials added in a fixed order, so
// results are bitwise deterministic. Full FP32 arithmetic (no TF32), also with --tf32 on. The
// forward also produces the BatchNorm statistics' partial sums of its output (the layer's BN
// follows the convolution).
// Private to src/ops/cuda/.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace mnist_ddp::kernels {

// Whether the direct kernels take a convolution of c input channels, k output channels, r x r
// filters and h x w images padded by pad: c == 1, r in {3, 5}, k within a grid dimension, each
// kernel's shared memory (the padded image, plus taps or per-warp sums) within the 48 KiB a block
// may use without opting in.
bool direct_conv_supported(int c, int k, int h, int w, int r, int pad);

// Blocks per output channel of the weight gradient's split over n images (depends only on the
// shape: deterministic), and the floats of partials scratch it needs: k * split * (r*r + 1).
int direct_conv_wgrad_split(int n, int k);
std::size_t direct_conv_wgrad_partials(int n, int k, int r);

// y[N][K][OH][OW] = conv(x[N][1][H][W], w[K][1][R][R], pad) + b[K] (OH = H + 2 pad - R + 1).
// moments != nullptr ([2 * K * N] doubles): also y's BatchNorm partial moments, laid out as
// launch_bn_moments' partials with split N (sum and sum of squares per channel and image), so
// the training forward's batchnorm_stats needs no pass over y of its own.
void launch_direct_conv_fwd(cudaStream_t stream, int n, int k, int h, int w, int r, int pad,
                            const float* x, const float* wt, const float* b, float* y,
                            double* moments);
// dw[K][1][R][R] = sum over images and positions of dy * x (shifted), db[K] = sum of dy: both
// overwritten. partials: direct_conv_wgrad_partials(n, k, r) floats of scratch.
void launch_direct_conv_wgrad(cudaStream_t stream, int n, int k, int h, int w, int r, int pad,
                              const float* x, const float* dy, float* partials, float* dw,
                              float* db);

}  // namespace mnist_ddp::kernels
