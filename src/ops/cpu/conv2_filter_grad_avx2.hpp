// conv2_filter_grad_avx2.hpp — the filter and bias gradient of a convolution whose input is
// channel-blocked at block 8 (layer2 on the AVX2 path: nChw8c in, nChw8c output gradient), in
// AVX2+FMA intrinsics. Why: oneDNN's AVX2 backward-weights kernel for it ran at 76% of the
// AVX2 SGEMM rate (5.7 ms at batch 100 on a Zen 5 core, where its forward and backward-data ran
// at 95-100%); this one skips the zero border's terms and takes 4.7 ms. The oneDNN backend
// (dnnl_backend.cpp) runs it at block 8 where a rank computes on one thread (--threads 1, the
// default); with more, oneDNN's multi-threaded kernel; at block 16 oneDNN's AVX-512 kernel.
#pragma once

#include "ops/cpu/avx2_build.hpp"
#include "ops/cpu/cpu_kernels.hpp"

namespace mnist_ddp::blocked {

// dw, db for x: [N][C/8][H][W][8] and the output gradient dy: [N][K/8][OH][OW][8]; dw:
// [K][C][R][R] (PyTorch's layout); db: [K]. Stride 1, C and K multiples of 8, filter width
// 1..7 within the padded image (checked). Per weight: float sums over one image, added in
// float over the images. One thread. Defined only where kAvx2Build.
void channel_filter_grad(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db);

}  // namespace mnist_ddp::blocked
