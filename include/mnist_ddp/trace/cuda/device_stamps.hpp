// device_stamps.hpp — the GPU's timeline clock (for the CUDA sources: trace/cuda defines it,
// ops/cuda's CudaOps makes it; public so that both may include it): CUDA events on the compute
// stream, read back between steps, with NVTX ranges.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "mnist_ddp/trace/trace.hpp"

namespace mnist_ddp {

std::unique_ptr<StampClock> make_device_stamp_clock(cudaStream_t stream);

}  // namespace mnist_ddp
