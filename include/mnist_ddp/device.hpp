// device.hpp — which compute device a run uses, and the seam to the CUDA backend. In a CPU-only
// build the CUDA functions come from src/cuda_stub.cpp and report "built without CUDA".
#pragma once

#include <cstddef>
#include <string>

namespace mnist_ddp {

enum class Device { Cpu, Cuda };
enum class DeviceChoice { Cpu, Cuda, Auto };

// True when the CUDA backend is linked into this binary.
bool cuda_built();
// Number of usable GPUs (0 without a driver or without the CUDA backend; never throws).
int cuda_device_count();
// Device memory for Tensor; throws UserError in a build without CUDA.
void* cuda_alloc(std::size_t bytes);
void cuda_free(void* p);

// Resolves --device: auto -> cuda when built with CUDA and a GPU is visible, else cpu. An explicit
// `cuda` that cannot be honoured is a UserError that says why.
Device resolve_device(DeviceChoice choice);

const char* to_string(Device d);

}  // namespace mnist_ddp
