// device_stamps.hpp — the GPU's timeline clock (private to the CUDA sources): CUDA events on the
// compute stream, read back between steps, with NVTX ranges.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "mnist_ddp/trace/trace.hpp"

namespace mnist_ddp {

std::unique_ptr<StampClock> make_device_stamp_clock(cudaStream_t stream);

}  // namespace mnist_ddp
