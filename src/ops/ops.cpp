// ops.cpp — the Ops interface's composite operations that a backend may run its own way
// (ops.hpp); here, their definition by the basic operations.
#include "mnist_ddp/ops/ops.hpp"

namespace mnist_ddp {

void Ops::conv2d_backward(const ConvGeom& g, const float* x, const float* w, const float* dy,
                          float* dw, float* db, float* dx) {
  conv2d_backward_filter(g, x, dy, dw, db);
  if (dx != nullptr) conv2d_backward_data(g, w, dy, dx);
}

}  // namespace mnist_ddp
