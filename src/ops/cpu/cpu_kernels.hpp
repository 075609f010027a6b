// cpu_kernels.hpp — the reference CPU kernels, templated on float/double (double drives the finite-
// difference gradient checks). Explicitly instantiated in src/ops/cpu/cpu_ops.cpp for both types.
//
// Layout convention: activations are channel-major [C][N][H][W] ("CNHW"). A batched im2col GEMM
// then writes a convolution's output in place and BatchNorm reads each channel contiguously. The
// network input (C=1) is the same in NCHW and CNHW; the flatten before `fc` transposes to
// PyTorch's [N][C*H*W] order so the fc weights keep PyTorch's layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "mnist_ddp/ops/op_params.hpp"

namespace mnist_ddp::cpu {

// Elements of scratch space the conv kernels need for geometry g (im2col of one image chunk).
std::size_t conv2d_workspace(const ConvGeom& g);
// Images per im2col chunk (sized to stay in L2 cache).
int conv2d_chunk(const ConvGeom& g);

// y[K][N][OH][OW] = conv(x[C][N][H][W], w[K][C][R][R]) + b[K]
template <class T>
void conv2d_forward(const ConvGeom& g, const T* x, const T* w, const T* b, T* y, T* work);
// dw[K][C][R][R] and db[K] are overwritten with the gradients for dy[K][N][OH][OW].
template <class T>
void conv2d_backward_filter(const ConvGeom& g, const T* x, const T* dy, T* dw, T* db, T* work);
// dx[C][N][H][W] is overwritten.
template <class T>
void conv2d_backward_data(const ConvGeom& g, const T* w, const T* dy, T* dx, T* work);

// BatchNorm over x[C][M] (M = N*H*W per channel), PyTorch semantics: biased variance for the
// normalisation, unbiased for running_var, running = (1 - momentum) * running + momentum * stat.
template <class T>
void batchnorm_forward_train(int c, std::size_t m, const T* x, const T* gamma, const T* beta,
                             double eps, double momentum, T* y, T* save_mean, T* save_invstd,
                             T* running_mean, T* running_var);
template <class T>
void batchnorm_forward_eval(int c, std::size_t m, const T* x, const T* gamma, const T* beta,
                            const T* running_mean, const T* running_var, double eps, T* y);
// Backward of the training-mode forward; dx, dgamma[C], dbeta[C] overwritten.
template <class T>
void batchnorm_backward(int c, std::size_t m, const T* x, const T* dy, const T* gamma,
                        const T* save_mean, const T* save_invstd, T* dx, T* dgamma, T* dbeta);
// Backward of the eval-mode (frozen statistics) forward.
template <class T>
void batchnorm_backward_eval(int c, std::size_t m, const T* x, const T* dy, const T* gamma,
                             const T* running_mean, const T* running_var, double eps, T* dx,
                             T* dgamma, T* dbeta);

// Batch statistics of x[C][M] for training-mode BN: save_mean, save_invstd = 1/sqrt(var + eps)
// (biased var), and the running-statistics update (unbiased var), as batchnorm_forward_train.
// With sync, the statistics are the union batch's (SyncBatchNorm).
template <class T>
void batchnorm_stats(int c, std::size_t m, const T* x, double eps, double momentum, T* save_mean,
                     T* save_invstd, T* running_mean, T* running_var, const BnSync* sync = nullptr);
// Eval-mode equivalents of the saved statistics: mean = running_mean, invstd from running_var.
template <class T>
void batchnorm_eval_stats(int c, const T* running_mean, const T* running_var, double eps, T* mean,
                          T* invstd);

// Fused BN-apply -> ReLU -> 2x2 max pool, the hot path of each conv block:
//   y[C][N][H/2][W/2] = relu(maxpool2x2(gamma * (x - mean) * invstd + beta)), argmax as maxpool.
// Equal to the composition of the unfused ops (tested), without materialising the BN output.
template <class T>
void bn_relu_pool_forward(int c, int n, int h, int w, const T* x, const T* gamma, const T* beta,
                          const T* mean, const T* invstd, T* y, std::uint8_t* argmax);
// Backward of bn_relu_pool_forward given dy at the pooled resolution. batch_stats: the statistics
// were the batch's (training BN: gradient flows through mean and var) or fixed (eval/frozen BN).
// dx[C][N][H][W], dgamma[C], dbeta[C] overwritten.
template <class T>
void bn_relu_pool_backward(int c, int n, int h, int w, const T* x, const T* y, const T* dy,
                           const std::uint8_t* argmax, const T* gamma, const T* mean,
                           const T* invstd, bool batch_stats, T* dx, T* dgamma, T* dbeta,
                           const BnSync* sync = nullptr);

// y = max(x, 0); dx = dy where y > 0 else 0 (in place allowed).
template <class T>
void relu_forward(std::size_t n, const T* x, T* y);
template <class T>
void relu_backward(std::size_t n, const T* y, const T* dy, T* dx);

// 2x2 stride-2 max pooling over `planes` planes of h x w (h, w even). argmax[i] in 0..3 is the
// first maximum in row-major order (PyTorch's tie rule).
template <class T>
void maxpool2x2_forward(std::size_t planes, int h, int w, const T* x, T* y, std::uint8_t* argmax);
template <class T>
void maxpool2x2_backward(std::size_t planes, int h, int w, const T* dy, const std::uint8_t* argmax,
                         T* dx);

// y[N][out] = x[N][in] * w[out][in]^T + b[out]
template <class T>
void linear_forward(int n, int in, int out, const T* x, const T* w, const T* b, T* y);
// dw, db overwritten; dx overwritten unless null.
template <class T>
void linear_backward(int n, int in, int out, const T* x, const T* w, const T* dy, T* dx, T* dw,
                     T* db);

// Sum over the batch of -log softmax(logits)[label]. If dlogits is not null it receives
// (softmax - onehot) * grad_scale (grad_scale = 1/N for a mean loss).
template <class T>
double softmax_cross_entropy(int n, int classes, const T* logits, const std::int32_t* labels,
                             T* dlogits, double grad_scale);
// Number of rows whose label is among the k largest logits (ties count against: a label is in
// the top k when fewer than k logits are strictly greater).
template <class T>
int topk_correct(int n, int classes, const T* logits, const std::int32_t* labels, int k);

// [C][N][HW] <-> [N][C][HW]
template <class T>
void cnhw_to_nchw(int c, int n, int hw, const T* x, T* y);
template <class T>
void nchw_to_cnhw(int c, int n, int hw, const T* x, T* y);

// One step of PyTorch's SGD (op_params.hpp: SgdParams) over n parameters.
template <class T>
void sgd_step(std::size_t n, T* p, const T* g, T* momentum_buf, const SgdParams& s,
              bool first_step);

}  // namespace mnist_ddp::cpu
