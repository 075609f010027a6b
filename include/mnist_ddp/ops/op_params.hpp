// op_params.hpp — the parameter structs of the ops both the Ops interface (ops.hpp) and the
// reference kernels (src/ops/cpu/cpu_kernels.hpp) take: a convolution's geometry, SyncBatchNorm's
// exchanges, SGD's settings. Every backend takes them (the CUDA one too): the ops layer's
// vocabulary, in namespace mnist_ddp, public so that ops.hpp includes no private header.
#pragma once

#include <cstdint>
#include <functional>

namespace mnist_ddp {

// A stride-1 square-kernel convolution with symmetric zero padding.
struct ConvGeom {
  int n = 0, c = 0, h = 0, w = 0;  // input [C][N][H][W]
  int k = 0;                       // output channels
  int r = 0;                       // kernel size (r x r)
  int pad = 0;
  int chunk = 0;  // images per im2col chunk; 0: sized automatically to stay in cache
  int out_h() const { return h + 2 * pad - r + 1; }
  int out_w() const { return w + 2 * pad - r + 1; }
};

// Ops::bn_relu_pool_backward's arguments as one value (Ops::bn_relu_pool_conv_backward): the
// block's convolution output x and the statistics its forward used (the batch's or the running
// ones), the pooled output y, its gradient dy and argmax; the gradients dgamma and dbeta, and dx
// (the convolution's output gradient: scratch in bn_relu_pool_conv_backward).
struct BnReluPoolGrad {
  int c = 0, n = 0, h = 0, w = 0;  // x: c channels, n images of h x w, in the backend's layout
  const float* x = nullptr;
  const float* y = nullptr;  // c channels, n images of h/2 x w/2 (backend layout): y, dy, argmax
  const float* dy = nullptr;
  const std::uint8_t* argmax = nullptr;
  const float* gamma = nullptr;
  const float* mean = nullptr;    // [c]
  const float* invstd = nullptr;  // [c]
  bool batch_stats = true;        // training BN (the batch's statistics), else fixed ones
  float* dx = nullptr;
  float* dgamma = nullptr;
  float* dbeta = nullptr;
};

// SyncBatchNorm's two exchanges, called by the training-mode BN ops between their per-rank
// reductions and what they compute from them (every backend, every rank, same order):
//   stats(c, mean, var, count): this rank's per-channel batch mean and biased variance over
//     `count` values per channel, in place -> the union batch's (count -> the union's count);
//   grad_sums(c, sums, count): per channel {sum(dy), sum(dy * (x - mean))} of the BN output
//     gradient, sums[2c] in place -> summed over ranks (count -> the union's count).
struct BnSync {
  std::function<void(int c, double* mean, double* var, double* count)> stats;
  std::function<void(int c, double* sums, double* count)> grad_sums;
};

// PyTorch's SGD (torch.optim.SGD, foreach=False semantics):
//   d = g + weight_decay * p
//   buf = d (first step) or momentum * buf + (1 - dampening) * d
//   d = d + momentum * buf (nesterov) or buf
//   p = p - lr * d
struct SgdParams {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

}  // namespace mnist_ddp
