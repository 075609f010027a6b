// wgrad_tf32.cuh — layer2's weight and bias gradients on TF32 tensor cores (--gpu-kernels own),
// in place of cuDNN's, which at batch 100 spends ~80 us on the critical path (its FFT algorithm:
// bench/RESULTS.md) for a 32 x 400 x 19,600 GEMM. One block per slice of the batch keeps an
// image's output gradient and zero-padded input in shared memory and multiplies them with
// mma.sync m16n8k8 (mma_layout.hpp), the patches read in place (no im2col buffer); the slices'
// partial sums are added in a fixed order by a second kernel, so the result is bitwise the same
// run after run and under graph replay. The bias gradient is summed in FP32 from the same shared
// copy of dY, in position order. Inputs are rounded to TF32 as cuDNN's TF32 math does
// (cvt.rna); products accumulate in FP32.
// Private to src/ops/cuda/.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace mnist_ddp::kernels {

// Whether the kernel takes a convolution of c input channels, k output channels, r x r filters
// and h x w images padded by pad: k a multiple of 16 dividing the block's 8 warps' rows (16, 32,
// 64 or 128), stride 1, at most 16 column tiles per warp, and dY plus the padded image of one
// input within the 48 KiB of shared memory a block may use without opting in.
bool wgrad_tf32_supported(int c, int k, int h, int w, int r, int pad);

// Blocks over the batch (depends only on n: deterministic) and the floats of partials scratch
// they need: split * (k * c * r * r + k).
int wgrad_tf32_split(int n);
std::size_t wgrad_tf32_partials(int n, int c, int k, int r);

// dw[K][C][R][R] = sum over images and output positions of dy * x (shifted), db[K] = sum of dy:
// both overwritten. x: [N][C][H][W], dy: [N][K][OH][OW]. partials: wgrad_tf32_partials floats.
void launch_wgrad_tf32(cudaStream_t stream, int n, int c, int k, int h, int w, int r, int pad,
                       const float* x, const float* dy, float* partials, float* dw, float* db);

}  // namespace mnist_ddp::kernels
