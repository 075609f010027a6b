// conv1_bf16.hpp — the convolution whose input is the one-channel image (layer1) under --amp bf16
// on AVX512-BF16, in intrinsics: its forward pass and its filter and bias gradients as vdpbf16ps
// (bf16 pairs multiplied exactly, fp32 accumulation, as oneDNN's bf16 kernels compute), output
// (gradient) channel-blocked [N][K/16][OH][OW][16]. Why: oneDNN 2.6.3's bf16 kernels for one input
// channel run at about 40% of its bf16 GEMM rate (0.28-0.36 ms a pass at batch 100 on Zen 5, as
// slow as its fp32 ones); the pairs here are two neighbouring columns of one image row (and, in the
// filter gradient, of one output-gradient row), read as they lie. dnnl_bf16.cpp runs them where
// the rank computes on one thread.
#pragma once

#include <cstdint>

#include "ops/cpu/cpu_kernels.hpp"

namespace mnist_ddp::bf16 {

// Whether this build has the kernels (compiled for AVX512-BF16, -BW and -VL: -march=native on such
// a CPU; never the portable x86-64-v3 or aarch64 builds, where oneDNN's run) and they take geometry
// g: one input channel, K a multiple of 16, filter width 1..5 within the padded image.
bool image_kernels_fit(const ConvGeom& g);

// y = conv(x, w) + b on bf16 x and w: x [N][1][H][W] fp32 (rounded to bf16 here); w [K][1][R][R]
// (PyTorch's layout, rounded here); b [K] (fp32, the accumulators' start); y [N][K/16][OH][OW][16]
// fp32. Per output: b, then the taps' products row by row, in fp32.
void image_forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y);

// dw [K][1][R][R], db [K] for the output gradient's bf16 copy dy16 [N][K/16][OH][OW][16] and x
// [N][1][H][W] fp32 (rounded to bf16 here). Per weight: fp32 sums over one image, added in double
// over the images.
void image_filter_grad(const ConvGeom& g, const float* x, const std::uint16_t* dy16, float* dw,
                       float* db);

}  // namespace mnist_ddp::bf16
