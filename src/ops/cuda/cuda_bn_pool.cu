// cuda_bn_pool.cu — CudaOps' BatchNorm statistics (split reductions, SyncBatchNorm's host
// exchange) and the fused BN->ReLU->maxpool forward and backward (cuda_ops.hpp).
#include "ops/cuda/cuda_ops.hpp"

namespace mnist_ddp {
namespace cuda_ops {

void CudaOps::batchnorm_stats(int c, int n, int hw, const float* x, double eps, double momentum,
                              float* save_mean, float* save_invstd, float* running_mean,
                              float* running_var) {
  MNIST_DDP_CHECK(c >= 1 && c <= 64, "more channels than the BN scratch holds");
  const long m = static_cast<long>(n) * hw;
  int split = reduce_split(c, m);
  const double* partials = bn_partials_;
  if (fused_.y == x && fused_.c == c && fused_.n == n && fused_.hw == hw) {
    // x is the direct convolution's output, which already wrote its partial moments (one per
    // channel and image; the same stream, so they are complete when the moments kernel runs).
    split = n;
    partials = fused_.moments;
  } else {
    MNIST_DDP_CHECK(c * split <= kMaxPartials, "BN reduction split larger than its scratch");
    launch_bn_partial_moments(dim3(split, c), stream_, c, n, hw, x, bn_partials_);
    CUDA_CHECK(cudaGetLastError());
  }
  fused_ = {};
  // Without SyncBatchNorm the statistics come straight from the partials; with it, this rank's
  // moments go to bn_sums_ for the host exchange.
  launch_bn_moments(blocks_for(c), stream_, c, split, partials, static_cast<double>(m), eps,
                    momentum, bn_sync_ == nullptr ? nullptr : bn_sums_, save_mean, save_invstd,
                    running_mean, running_var);
  CUDA_CHECK(cudaGetLastError());
  if (bn_sync_ == nullptr) return;
  // SyncBatchNorm forward: this rank's moments, combined with every rank's on the host (the
  // BnSync exchange: a few doubles per channel), then the statistics of the union batch.
  std::vector<double> moments(2 * static_cast<std::size_t>(c)), mean(c), var(c);
  // Sync: the legacy-stream copy waits for the moments kernel on the ops' stream.
  CUDA_CHECK(cudaMemcpy(moments.data(), bn_sums_, moments.size() * sizeof(double),
                        cudaMemcpyDeviceToHost));
  for (int ch = 0; ch < c; ++ch) {
    mean[ch] = moments[2 * ch];
    var[ch] = moments[2 * ch + 1];
  }
  double md = static_cast<double>(n) * hw;
  bn_sync_->stats(c, mean.data(), var.data(), &md);
  for (int ch = 0; ch < c; ++ch) {
    moments[2 * ch] = mean[ch];
    moments[2 * ch + 1] = var[ch];
  }
  CUDA_CHECK(cudaMemcpy(bn_sums_, moments.data(), moments.size() * sizeof(double),
                        cudaMemcpyHostToDevice));
  launch_bn_finalize(blocks_for(c), stream_, c, bn_sums_, md, eps, momentum, save_mean, save_invstd,
                     running_mean, running_var);
  CUDA_CHECK(cudaGetLastError());
}

void CudaOps::batchnorm_eval_stats(int c, const float* running_mean, const float* running_var,
                                   double eps, float* mean, float* invstd) {
  launch_bn_eval_stats(blocks_for(c), stream_, c, running_mean, running_var, eps, mean, invstd);
  CUDA_CHECK(cudaGetLastError());
}

void CudaOps::bn_relu_pool_forward(int c, int n, int h, int w, const float* x, const float* gamma,
                                   const float* beta, const float* mean, const float* invstd,
                                   float* y, std::uint8_t* argmax) {
  const std::size_t total = static_cast<std::size_t>(n) * c * (h / 2) * (w / 2);
  launch_bn_relu_pool_fwd(blocks_for(total), stream_, c, n, h, w, x, gamma, beta, mean, invstd, y,
                          argmax);
  CUDA_CHECK(cudaGetLastError());
}

void CudaOps::bn_relu_pool_backward(int c, int n, int h, int w, const float* x, const float* y,
                                    const float* dy, const std::uint8_t* argmax, const float* gamma,
                                    const float* mean, const float* invstd, bool batch_stats,
                                    float* dx, float* dgamma, float* dbeta) {
  MNIST_DDP_CHECK(c >= 1 && c <= 64, "more channels than the BN scratch holds");
  const int split = reduce_split(c, static_cast<long>(n) * (h / 2) * (w / 2));
  MNIST_DDP_CHECK(c * split <= kMaxPartials, "BN reduction split larger than its scratch");
  launch_bn_relu_pool_partials(dim3(split, c), stream_, c, n, h, w, x, y, dy, argmax, mean,
                               bn_partials_);
  CUDA_CHECK(cudaGetLastError());
  launch_bn_grad_sums(blocks_for(c), stream_, c, split, bn_partials_, invstd, bn_sums_, dgamma,
                      dbeta);
  CUDA_CHECK(cudaGetLastError());
  double md = static_cast<double>(n) * h * w;
  if (bn_sync_ != nullptr && batch_stats) {
    // SyncBatchNorm backward: [sum dy, sum dy (x - mean)] summed over ranks on the host
    // (dgamma/dbeta stay this rank's: DDP averages them like every gradient).
    std::vector<double> sums(2 * static_cast<std::size_t>(c));
    // Sync: the legacy-stream copy waits for the sums kernel on the ops' stream.
    CUDA_CHECK(
        cudaMemcpy(sums.data(), bn_sums_, sums.size() * sizeof(double), cudaMemcpyDeviceToHost));
    bn_sync_->grad_sums(c, sums.data(), &md);
    CUDA_CHECK(
        cudaMemcpy(bn_sums_, sums.data(), sums.size() * sizeof(double), cudaMemcpyHostToDevice));
  }
  const std::size_t total = static_cast<std::size_t>(n) * c * (h / 2) * (w / 2);
  launch_bn_relu_pool_dx(blocks_for(total), stream_, c, n, h, w, x, y, dy, argmax, gamma, mean,
                         invstd, bn_sums_, md, batch_stats, dx);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda_ops

}  // namespace mnist_ddp
