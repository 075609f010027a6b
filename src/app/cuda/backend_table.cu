// backend_table.cu — libmnist_ddp_cuda.so's entry point: the table of the CUDA seam's functions
// (app/cuda_backend.hpp, one entry per line of MNIST_DDP_CUDA_SEAM) that the mnist_ddp binary's
// loader calls through. The plugin is linked with -Bsymbolic-functions, so these bind to the
// plugin's own definitions, never to the loader's forwarding functions of the same names in the
// binary.
#include "mnist_ddp/app/cuda_backend.hpp"
#include "mnist_ddp/launch/device.hpp"

namespace mnist_ddp {

namespace {

// Each function's address in its field: a function whose declaration disagrees with the list does
// not convert, and the plugin does not compile.
#define MNIST_DDP_CUDA_SEAM_ENTRY(kind, field, function, ret, params, args, stub) &function,
const CudaBackend kTable{kCudaBackendAbi, sizeof(CudaBackend), kCudaBackendLayout,
                         MNIST_DDP_CUDA_SEAM(MNIST_DDP_CUDA_SEAM_ENTRY)};
#undef MNIST_DDP_CUDA_SEAM_ENTRY

}  // namespace

// The test and benchmark binaries link the backend: the app layer's calls reach it through its own
// table (the binary's cuda_plugin() is the loader's, app/cuda_loader.cpp).
const CudaBackend& cuda_plugin() {
  return kTable;
}

}  // namespace mnist_ddp

extern "C" __attribute__((visibility("default"))) const mnist_ddp::CudaBackend*
mnist_ddp_cuda_backend() {
  return &mnist_ddp::kTable;
}
