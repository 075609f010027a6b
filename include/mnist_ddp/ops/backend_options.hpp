// backend_options.hpp — what a run tells the compute backend it makes (make_cpu_backend,
// make_cuda_ops: ops.hpp): one struct for every backend, so a new backend setting is a field here
// and the code that reads it, not another argument through the registry and the CUDA seam. The
// initialisers are the flags' defaults (app/flags.cpp fills them).
#pragma once

#include "mnist_ddp/base/choices.hpp"

namespace mnist_ddp {

struct BackendOptions {
  CpuKernels cpu_kernels = CpuKernels::OneDnn;  // --cpu-kernels: oneDNN, or the reference oracle
  bool tf32 = true;  // --tf32: TF32 tensor cores (PyTorch's cuDNN default)
  GpuKernels gpu_kernels = GpuKernels::Cudnn;  // --gpu-kernels: own kernels where cuDNN is slow
};

}  // namespace mnist_ddp
