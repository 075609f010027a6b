// ops.cpp — the Ops interface's composite operations that a backend may run its own way
// (ops.hpp); here, their definition by the basic operations.
#include "mnist_ddp/ops/ops.hpp"

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {

void Ops::conv2d_backward(const ConvGeom& g, const float* x, const float* w, const float* dy,
                          float* dw, float* db, float* dx) {
  conv2d_backward_filter(g, x, dy, dw, db);
  if (dx != nullptr) conv2d_backward_data(g, w, dy, dx);
}

void Ops::bn_relu_pool_conv_backward(const BnReluPoolGrad& bn, const ConvGeom& g, const float* x,
                                     const float* w, float* dw, float* db, float* dx) {
  bn_relu_pool_backward(bn.c, bn.n, bn.h, bn.w, bn.x, bn.y, bn.dy, bn.argmax, bn.gamma, bn.mean,
                        bn.invstd, bn.batch_stats, bn.dx, bn.dgamma, bn.dbeta);
  conv2d_backward(g, x, w, bn.dx, dw, db, dx);
}

std::unique_ptr<StepGraphs> Ops::make_step_graphs(CaptureHooks hooks, bool inject_failure) {
  MNIST_DDP_CHECK(false, "CUDA graphs asked of a backend without a stream");
  return nullptr;
}

std::unique_ptr<GradScaler> Ops::make_grad_scaler(const LossScaleRule& rule) {
  MNIST_DDP_CHECK(false, "a loss scaler asked of a backend without one (--amp fp16 is GPU-only)");
  return nullptr;
}

}  // namespace mnist_ddp
