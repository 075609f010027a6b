// blocked_ops.hpp — kernels on channel-blocked activations [N][C/B][H][W][B] (oneDNN's nChw8c
// for B = 8, AVX2's vector, or nChw16c for B = 16, AVX-512's), the layout of the oneDNN backend:
// BatchNorm statistics, the fused BN->ReLU->maxpool forward/backward, and the conversions to/from
// the fc rows. Every inner loop runs over the B channels of a block, one SIMD vector wide. `block`
// is 8 or 16 and C a multiple of it. Semantics are those of the reference kernels in
// cpu_kernels.hpp (tested against them, at both block sizes).
#pragma once

#include <cstdint>

#include "ops/cpu/cpu_kernels.hpp"

namespace mnist_ddp::blocked {

// sync: SyncBatchNorm's exchanges (cpu_kernels.hpp), or nullptr.
void batchnorm_stats(int block, int c, int n, int hw, const float* x, double eps, double momentum,
                     float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                     const BnSync* sync = nullptr);
// y, argmax: [N][C/B][H/2][W/2][B]. y16 / dx16, where not nullptr: the output's bf16 copy
// (to_bf16 of each value, stored as it is made), in the output's layout (--amp bf16). dx may
// be nullptr where dx16 is not: the backward then stores only the bf16 copy.
void bn_relu_pool_forward(int block, int c, int n, int h, int w, const float* x, const float* gamma,
                          const float* beta, const float* mean, const float* invstd, float* y,
                          std::uint8_t* argmax, std::uint16_t* y16 = nullptr);
void bn_relu_pool_backward(int block, int c, int n, int h, int w, const float* x, const float* y,
                           const float* dy, const std::uint8_t* argmax, const float* gamma,
                           const float* mean, const float* invstd, bool batch_stats, float* dx,
                           float* dgamma, float* dbeta, const BnSync* sync = nullptr,
                           std::uint16_t* dx16 = nullptr);
// x[N][C/B][HW][B] <-> rows[N][C*HW] (PyTorch's flatten order).
void to_rows(int block, int c, int n, int hw, const float* x, float* rows);
void from_rows(int block, int c, int n, int hw, const float* rows, float* x);
// [C][N][HW] (reference layout) <-> blocked, for tests and tools.
void from_cnhw(int block, int c, int n, int hw, const float* x, float* y);
void to_cnhw(int block, int c, int n, int hw, const float* x, float* y);

}  // namespace mnist_ddp::blocked
