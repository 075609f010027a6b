// cpu_backend.cpp — CpuOps: the Ops interface over the templated reference kernels (float),
// owning the im2col workspace; and the backend factory.
#include <cstdlib>
#include <vector>

#include "mnist_ddp/check.hpp"
#include "mnist_ddp/ops.hpp"

extern "C" void openblas_set_num_threads(int num_threads);

namespace mnist_ddp {
namespace {

class CpuOps final : public Ops {
 public:
  Device device() const override { return Device::Cpu; }

  void conv2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b,
                      float* y) override {
    cpu::conv2d_forward(g, x, w, b, y, workspace(g));
  }
  void conv2d_backward_filter(const ConvGeom& g, const float* x, const float* dy, float* dw,
                              float* db) override {
    cpu::conv2d_backward_filter(g, x, dy, dw, db, workspace(g));
  }
  void conv2d_backward_data(const ConvGeom& g, const float* w, const float* dy,
                            float* dx) override {
    cpu::conv2d_backward_data(g, w, dy, dx, workspace(g));
  }
  void batchnorm_forward_train(int c, std::size_t m, const float* x, const float* gamma,
                               const float* beta, double eps, double momentum, float* y,
                               float* save_mean, float* save_invstd, float* running_mean,
                               float* running_var) override {
    cpu::batchnorm_forward_train(c, m, x, gamma, beta, eps, momentum, y, save_mean, save_invstd,
                                 running_mean, running_var);
  }
  void batchnorm_forward_eval(int c, std::size_t m, const float* x, const float* gamma,
                              const float* beta, const float* running_mean,
                              const float* running_var, double eps, float* y) override {
    cpu::batchnorm_forward_eval(c, m, x, gamma, beta, running_mean, running_var, eps, y);
  }
  void batchnorm_backward(int c, std::size_t m, const float* x, const float* dy, const float* gamma,
                          const float* save_mean, const float* save_invstd, float* dx,
                          float* dgamma, float* dbeta) override {
    cpu::batchnorm_backward(c, m, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
  }
  void batchnorm_backward_eval(int c, std::size_t m, const float* x, const float* dy,
                               const float* gamma, const float* running_mean,
                               const float* running_var, double eps, float* dx, float* dgamma,
                               float* dbeta) override {
    cpu::batchnorm_backward_eval(c, m, x, dy, gamma, running_mean, running_var, eps, dx, dgamma,
                                 dbeta);
  }
  void batchnorm_stats(int c, std::size_t m, const float* x, double eps, double momentum,
                       float* save_mean, float* save_invstd, float* running_mean,
                       float* running_var) override {
    cpu::batchnorm_stats(c, m, x, eps, momentum, save_mean, save_invstd, running_mean, running_var);
  }
  void batchnorm_eval_stats(int c, const float* running_mean, const float* running_var, double eps,
                            float* mean, float* invstd) override {
    cpu::batchnorm_eval_stats(c, running_mean, running_var, eps, mean, invstd);
  }
  void bn_relu_pool_forward(int c, int n, int h, int w, const float* x, const float* gamma,
                            const float* beta, const float* mean, const float* invstd, float* y,
                            std::uint8_t* argmax) override {
    cpu::bn_relu_pool_forward(c, n, h, w, x, gamma, beta, mean, invstd, y, argmax);
  }
  void bn_relu_pool_backward(int c, int n, int h, int w, const float* x, const float* y,
                             const float* dy, const std::uint8_t* argmax, const float* gamma,
                             const float* mean, const float* invstd, bool batch_stats, float* dx,
                             float* dgamma, float* dbeta) override {
    cpu::bn_relu_pool_backward(c, n, h, w, x, y, dy, argmax, gamma, mean, invstd, batch_stats, dx,
                               dgamma, dbeta);
  }
  void relu_forward(std::size_t n, const float* x, float* y) override {
    cpu::relu_forward(n, x, y);
  }
  void relu_backward(std::size_t n, const float* y, const float* dy, float* dx) override {
    cpu::relu_backward(n, y, dy, dx);
  }
  void maxpool2x2_forward(std::size_t planes, int h, int w, const float* x, float* y,
                          std::uint8_t* argmax) override {
    cpu::maxpool2x2_forward(planes, h, w, x, y, argmax);
  }
  void maxpool2x2_backward(std::size_t planes, int h, int w, const float* dy,
                           const std::uint8_t* argmax, float* dx) override {
    cpu::maxpool2x2_backward(planes, h, w, dy, argmax, dx);
  }
  void linear_forward(int n, int in, int out, const float* x, const float* w, const float* b,
                      float* y) override {
    cpu::linear_forward(n, in, out, x, w, b, y);
  }
  void linear_backward(int n, int in, int out, const float* x, const float* w, const float* dy,
                       float* dx, float* dw, float* db) override {
    cpu::linear_backward(n, in, out, x, w, dy, dx, dw, db);
  }
  double softmax_cross_entropy(int n, int classes, const float* logits, const std::int32_t* labels,
                               float* dlogits, double grad_scale) override {
    return cpu::softmax_cross_entropy(n, classes, logits, labels, dlogits, grad_scale);
  }
  int topk_correct(int n, int classes, const float* logits, const std::int32_t* labels,
                   int k) override {
    return cpu::topk_correct(n, classes, logits, labels, k);
  }
  void cnhw_to_nchw(int c, int n, int hw, const float* x, float* y) override {
    cpu::cnhw_to_nchw(c, n, hw, x, y);
  }
  void nchw_to_cnhw(int c, int n, int hw, const float* x, float* y) override {
    cpu::nchw_to_cnhw(c, n, hw, x, y);
  }
  void sgd_step(std::size_t n, float* p, const float* g, float* buf, const SgdParams& s,
                bool first_step) override {
    cpu::sgd_step(n, p, g, buf, s, first_step);
  }
  std::uint8_t* alloc_bytes(std::size_t n) override {
    return static_cast<std::uint8_t*>(std::malloc(n > 0 ? n : 1));
  }
  void free_bytes(std::uint8_t* p) override { std::free(p); }

 private:
  float* workspace(const ConvGeom& g) {
    const std::size_t need = cpu::conv2d_workspace(g);
    if (work_.size() < need) work_.resize(need);
    return work_.data();
  }
  std::vector<float> work_;
};

}  // namespace

std::unique_ptr<Ops> make_cpu_ops() {
  return std::make_unique<CpuOps>();
}

std::unique_ptr<Ops> make_ops(Device device) {
  return device == Device::Cuda ? make_cuda_ops() : make_cpu_ops();
}

void set_blas_threads(int threads) {
  openblas_set_num_threads(threads > 0 ? threads : 1);
}

}  // namespace mnist_ddp
