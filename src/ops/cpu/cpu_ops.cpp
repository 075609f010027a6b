// cpu_ops.cpp — CpuOps, the reference backend: the Ops interface over the templated kernels
// of cpu_kernels.hpp (float, [C][N][H][W] activations), owning the im2col workspace; and the
// compute-thread setting.
#include <omp.h>

#include <cstdlib>
#include <vector>

#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "ops/cpu/cpu_kernels.hpp"
#include "ops/cpu/host_ops.hpp"

extern "C" void openblas_set_num_threads(int num_threads);

namespace mnist_ddp {
namespace {

class CpuOps final : public HostOps {
 public:
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
  void batchnorm_stats(int c, int n, int hw, const float* x, double eps, double momentum,
                       float* save_mean, float* save_invstd, float* running_mean,
                       float* running_var) override {
    cpu::batchnorm_stats(c, static_cast<std::size_t>(n) * hw, x, eps, momentum, save_mean,
                         save_invstd, running_mean, running_var, bn_sync_);
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
                               dgamma, dbeta, bn_sync_);
  }
  void to_fc_rows(int c, int n, int hw, const float* x, float* y) override {
    cpu::cnhw_to_nchw(c, n, hw, x, y);
  }
  void from_fc_rows(int c, int n, int hw, const float* x, float* y) override {
    cpu::nchw_to_cnhw(c, n, hw, x, y);
  }

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

void set_compute_threads(int threads) {
  const int t = threads > 0 ? threads : 1;
  openblas_set_num_threads(t);
  omp_set_num_threads(t);  // oneDNN's OpenMP runtime
}

}  // namespace mnist_ddp
