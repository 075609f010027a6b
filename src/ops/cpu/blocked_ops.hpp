// blocked_ops.hpp — kernels on channel-blocked activations [N][C/16][H][W][16] (oneDNN's
// nChw16c), the layout of the oneDNN backend: BatchNorm statistics, the fused BN->ReLU->maxpool
// forward/backward, and the conversions to/from the fc rows. Every inner loop runs over the 16
// channels of a block, one SIMD vector wide. C must be a multiple of 16. Semantics are those of
// the reference kernels in cpu_ops.hpp (tested against them).
#pragma once

#include <cstdint>

#include "ops/cpu/cpu_ops.hpp"

namespace mnist_ddp::blocked {

inline constexpr int kBlock = 16;

// sync: SyncBatchNorm's exchanges (cpu_ops.hpp), or nullptr.
void batchnorm_stats(int c, int n, int hw, const float* x, double eps, double momentum,
                     float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                     const cpu::BnSync* sync = nullptr);
// y, argmax: [N][C/16][H/2][W/2][16]
void bn_relu_pool_forward(int c, int n, int h, int w, const float* x, const float* gamma,
                          const float* beta, const float* mean, const float* invstd, float* y,
                          std::uint8_t* argmax);
void bn_relu_pool_backward(int c, int n, int h, int w, const float* x, const float* y,
                           const float* dy, const std::uint8_t* argmax, const float* gamma,
                           const float* mean, const float* invstd, bool batch_stats, float* dx,
                           float* dgamma, float* dbeta, const cpu::BnSync* sync = nullptr);
// x[N][C/16][HW][16] <-> rows[N][C*HW] (PyTorch's flatten order).
void to_rows(int c, int n, int hw, const float* x, float* rows);
void from_rows(int c, int n, int hw, const float* rows, float* x);
// [C][N][HW] (reference layout) <-> blocked, for tests and tools.
void from_cnhw(int c, int n, int hw, const float* x, float* y);
void to_cnhw(int c, int n, int hw, const float* x, float* y);

}  // namespace mnist_ddp::blocked
