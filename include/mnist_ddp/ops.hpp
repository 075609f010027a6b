// ops.hpp — the Ops interface: exactly the operations the ConvNet needs, on float32 buffers that
// live on the backend's device. CpuOps (src/cpu/) is the reference; CudaOps (src/cuda/, later)
// implements the same contract with cuDNN/cuBLAS. Shapes follow cpu_ops.hpp (CNHW activations).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "mnist_ddp/cpu_ops.hpp"
#include "mnist_ddp/device.hpp"

namespace mnist_ddp {

using cpu::ConvGeom;
using cpu::SgdParams;

class Ops {
 public:
  virtual ~Ops() = default;
  virtual Device device() const = 0;

  virtual void conv2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b,
                              float* y) = 0;
  virtual void conv2d_backward_filter(const ConvGeom& g, const float* x, const float* dy, float* dw,
                                      float* db) = 0;
  virtual void conv2d_backward_data(const ConvGeom& g, const float* w, const float* dy,
                                    float* dx) = 0;
  virtual void batchnorm_forward_train(int c, std::size_t m, const float* x, const float* gamma,
                                       const float* beta, double eps, double momentum, float* y,
                                       float* save_mean, float* save_invstd, float* running_mean,
                                       float* running_var) = 0;
  virtual void batchnorm_forward_eval(int c, std::size_t m, const float* x, const float* gamma,
                                      const float* beta, const float* running_mean,
                                      const float* running_var, double eps, float* y) = 0;
  virtual void batchnorm_backward(int c, std::size_t m, const float* x, const float* dy,
                                  const float* gamma, const float* save_mean,
                                  const float* save_invstd, float* dx, float* dgamma,
                                  float* dbeta) = 0;
  virtual void batchnorm_backward_eval(int c, std::size_t m, const float* x, const float* dy,
                                       const float* gamma, const float* running_mean,
                                       const float* running_var, double eps, float* dx,
                                       float* dgamma, float* dbeta) = 0;
  virtual void batchnorm_stats(int c, std::size_t m, const float* x, double eps, double momentum,
                               float* save_mean, float* save_invstd, float* running_mean,
                               float* running_var) = 0;
  virtual void batchnorm_eval_stats(int c, const float* running_mean, const float* running_var,
                                    double eps, float* mean, float* invstd) = 0;
  virtual void bn_relu_pool_forward(int c, int n, int h, int w, const float* x, const float* gamma,
                                    const float* beta, const float* mean, const float* invstd,
                                    float* y, std::uint8_t* argmax) = 0;
  virtual void bn_relu_pool_backward(int c, int n, int h, int w, const float* x, const float* y,
                                     const float* dy, const std::uint8_t* argmax,
                                     const float* gamma, const float* mean, const float* invstd,
                                     bool batch_stats, float* dx, float* dgamma, float* dbeta) = 0;
  virtual void relu_forward(std::size_t n, const float* x, float* y) = 0;
  virtual void relu_backward(std::size_t n, const float* y, const float* dy, float* dx) = 0;
  virtual void maxpool2x2_forward(std::size_t planes, int h, int w, const float* x, float* y,
                                  std::uint8_t* argmax) = 0;
  virtual void maxpool2x2_backward(std::size_t planes, int h, int w, const float* dy,
                                   const std::uint8_t* argmax, float* dx) = 0;
  virtual void linear_forward(int n, int in, int out, const float* x, const float* w,
                              const float* b, float* y) = 0;
  virtual void linear_backward(int n, int in, int out, const float* x, const float* w,
                               const float* dy, float* dx, float* dw, float* db) = 0;
  // Returns the summed loss; dlogits gets (softmax - onehot) * grad_scale.
  virtual double softmax_cross_entropy(int n, int classes, const float* logits,
                                       const std::int32_t* labels, float* dlogits,
                                       double grad_scale) = 0;
  virtual int topk_correct(int n, int classes, const float* logits, const std::int32_t* labels,
                           int k) = 0;
  virtual void cnhw_to_nchw(int c, int n, int hw, const float* x, float* y) = 0;
  virtual void nchw_to_cnhw(int c, int n, int hw, const float* x, float* y) = 0;
  virtual void sgd_step(std::size_t n, float* p, const float* g, float* momentum_buf,
                        const SgdParams& s, bool first_step) = 0;
  // Argmax indices for maxpool (byte buffers); the backend owns their memory.
  virtual std::uint8_t* alloc_bytes(std::size_t n) = 0;
  virtual void free_bytes(std::uint8_t* p) = 0;
};

// The reference CPU backend.
std::unique_ptr<Ops> make_cpu_ops();
// The CUDA backend (src/cuda/); in a CPU-only build, a UserError saying "built without CUDA".
std::unique_ptr<Ops> make_cuda_ops();
std::unique_ptr<Ops> make_ops(Device device);

// Single-threaded BLAS per rank unless this rank owns several cores.
void set_blas_threads(int threads);

}  // namespace mnist_ddp
