// comm_kernels.hpp — the device-side arithmetic the GPU communicators share (private to
// src/comm/cuda/): DDP's "sum, then divide by the world size" on device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace mnist_ddp {

// x[i] = x[i] / by for i < n (a division, not a multiplication by 1/by, so the result matches
// the host's "sum, then divide" bit for bit), enqueued on `stream`.
void divide_on_device(float* x, std::size_t n, float by, cudaStream_t stream);

}  // namespace mnist_ddp
