// registry.cpp — the backend registry: which Ops a device and --cpu-kernels choose. Every backend
// is linked into every build; in a CPU-only build the CUDA entry point is the stub that says
// "built without CUDA", so no call site needs an #ifdef.
#include "mnist_ddp/ops/ops.hpp"

namespace mnist_ddp {

std::unique_ptr<Ops> make_ops(Device device, const BackendOptions& options) {
  if (device == Device::Cuda) return make_cuda_ops(options);
  return options.cpu_kernels == CpuKernels::OneDnn ? make_dnnl_ops() : make_cpu_ops();
}

}  // namespace mnist_ddp
