// registry.cpp — the backend registry: which Ops a device and --cpu-kernels choose. Every backend
// is linked into every build; in a CPU-only build the CUDA entry point is the stub that says
// "built without CUDA", so no call site needs an #ifdef.
#include "mnist_ddp/ops/ops.hpp"

namespace mnist_ddp {

std::unique_ptr<Ops> make_ops(Device device, CpuKernels cpu_kernels, bool tf32,
                              GpuKernels gpu_kernels) {
  if (device == Device::Cuda) return make_cuda_ops(tf32, gpu_kernels);
  return cpu_kernels == CpuKernels::OneDnn ? make_dnnl_ops() : make_cpu_ops();
}

}  // namespace mnist_ddp
