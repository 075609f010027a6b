// image_filter_grad.hpp — the filter and bias gradients of a convolution whose input is the
// one-channel image (layer1), with the output gradient channel-blocked [N][K/B][OH][OW][B], in
// AVX2+FMA intrinsics. Why: oneDNN has no AVX2 backward-weights kernel for a one-channel NCHW
// input on nChw8c; it ran jit:avx2 on NHWC copies of the output gradient (measured at batch 100
// on Zen 4: 1.30 ms + 0.54 ms for the copy, against 0.52 ms for AVX-512's kernel on nChw16c).
// The oneDNN backend (dnnl_backend.cpp) uses this only where oneDNN would copy.
#pragma once

#include "ops/cpu/avx2_build.hpp"
#include "ops/cpu/cpu_kernels.hpp"

namespace mnist_ddp::blocked {

// g: stride 1, g.c == 1, g.k a multiple of `block` (8 or 16). x: [N][1][H][W]; dy: [N][K/B][OH]
// [OW][B]; dw: [K][1][R][R] (PyTorch's layout); db: [K]. Per weight: float sums over one image,
// added in double over the images. Defined only where kAvx2Build.
void image_filter_grad(int block, const cpu::ConvGeom& g, const float* x, const float* dy,
                       float* dw, float* db);

}  // namespace mnist_ddp::blocked
