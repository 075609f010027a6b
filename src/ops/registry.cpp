// registry.cpp — the CPU backend registry: which Ops --cpu-kernels chooses. (The GPU backend is
// the CUDA plugin's, reached by the app layer through its one object: app/cuda_backend.hpp.)
#include "mnist_ddp/ops/ops.hpp"

namespace mnist_ddp {

std::unique_ptr<Ops> make_cpu_backend(const BackendOptions& options) {
  return options.cpu_kernels == CpuKernels::OneDnn ? make_dnnl_ops() : make_cpu_ops();
}

}  // namespace mnist_ddp
