// conv1_avx2.hpp — the convolution whose input is the one-channel image (layer1) on the AVX2
// path, in AVX2+FMA intrinsics: its forward pass and its filter and bias gradients, with the
// output (gradient) channel-blocked [N][K/B][OH][OW][B]. Why: oneDNN has no AVX2 backward-weights
// kernel for a one-channel NCHW input on nChw8c (it copied the output gradient to NHWC: 1.30 ms
// + 0.54 ms for the copy at batch 100 on Zen 4, against AVX-512's 0.52 ms on nChw16c), and its
// AVX2 forward for it took 0.73-0.86 ms against AVX-512's 0.56 ms. The oneDNN backend
// (dnnl_backend.cpp) runs these at block 8 only (oneDNN's AVX-512 kernels are as fast or faster).
#pragma once

#include "ops/cpu/avx2_build.hpp"
#include "ops/cpu/cpu_kernels.hpp"

namespace mnist_ddp::blocked {

// Both: stride 1, g.c == 1, g.k a multiple of `block` (8 or 16), filter width 1..7 within the
// padded image; x: [N][1][H][W]. Defined only where kAvx2Build.

// y = conv(x, w) + b. w: [K][1][R][R] (PyTorch's layout); b: [K]; y: [N][K/B][OH][OW][B].
void image_conv_forward(int block, const ConvGeom& g, const float* x, const float* w,
                        const float* b, float* y);

// dw, db for the output gradient dy: [N][K/B][OH][OW][B]; dw: [K][1][R][R]; db: [K]. Per weight:
// float sums over one image, added in double over the images.
void image_filter_grad(int block, const ConvGeom& g, const float* x, const float* dy, float* dw,
                       float* db);

}  // namespace mnist_ddp::blocked
