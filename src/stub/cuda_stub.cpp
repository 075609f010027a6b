// cuda_stub.cpp — linked instead of the CUDA sources (src/*/cuda/) and the plugin loader in a
// CPU-only build (USE_CUDA=0): every entry of the CUDA seam's list (app/cuda_backend.hpp) answers
// "built without CUDA" (its stand-in column) instead of the binary failing to link or to start,
// by its name (the test binaries call the backend's functions directly) and through
// cuda_plugin() (the app layer).
#include <memory>
#include <string>
#include <vector>

#include "mnist_ddp/app/cuda_backend.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/launch/device.hpp"

namespace mnist_ddp {

bool cuda_built() {
  return false;
}

// The stand-in of every entry of the seam's list (app/cuda_backend.hpp): its last column.
#define MNIST_DDP_CUDA_SEAM_STUB(kind, field, function, ret, params, args, stub) \
  MNIST_DDP_CUDA_STUB_##kind(function, ret, params, stub)
#define MNIST_DDP_CUDA_STUB_CALL(function, ret, params, stub) \
  ret function params {                                       \
    stub                                                      \
  }
#define MNIST_DDP_CUDA_STUB_IF_LOADED MNIST_DDP_CUDA_STUB_CALL
#define MNIST_DDP_CUDA_STUB_CUSTOM MNIST_DDP_CUDA_STUB_CALL
#define MNIST_DDP_CUDA_STUB_PLUGIN MNIST_DDP_CUDA_STUB_CALL
MNIST_DDP_CUDA_SEAM(MNIST_DDP_CUDA_SEAM_STUB)
#undef MNIST_DDP_CUDA_SEAM_STUB
#undef MNIST_DDP_CUDA_STUB_CALL
#undef MNIST_DDP_CUDA_STUB_IF_LOADED
#undef MNIST_DDP_CUDA_STUB_CUSTOM
#undef MNIST_DDP_CUDA_STUB_PLUGIN

namespace {

// The stand-ins as the one object the app layer reaches them through.
#define MNIST_DDP_CUDA_SEAM_ENTRY(kind, field, function, ret, params, args, stub) &function,
const CudaBackend kStandIns{kCudaBackendAbi, sizeof(CudaBackend), kCudaBackendLayout,
                            MNIST_DDP_CUDA_SEAM(MNIST_DDP_CUDA_SEAM_ENTRY)};
#undef MNIST_DDP_CUDA_SEAM_ENTRY

}  // namespace

const CudaBackend& cuda_plugin() {
  return kStandIns;
}

}  // namespace mnist_ddp
