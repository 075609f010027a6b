// device.hpp — which compute device a run uses, and the seam to the CUDA backend. In a CPU-only
// build the CUDA functions come from src/stub/cuda_stub.cpp and report "built without CUDA".
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "mnist_ddp/base/choices.hpp"
#include "mnist_ddp/base/enum_names.hpp"

namespace mnist_ddp {

enum class Device { Cpu, Cuda };
inline constexpr std::array<NameOf<Device>, 2> kDeviceNames{
    {{Device::Cpu, "cpu"}, {Device::Cuda, "cuda"}}};

// True when the CUDA backend is linked into this binary.
bool cuda_built();
// Number of usable GPUs: 0 without the CUDA backend, without an NVIDIA driver or without a
// visible device. A driver that is there but cannot serve this runtime (too old, broken install)
// is a UserError with CUDA's words and the fix: never mistaken for "no GPU".
int cuda_device_count();
// Whether an NVIDIA driver (libcuda.so.1) can be loaded at all: a machine without one has no GPU.
bool nvidia_driver_installed();
// Device memory for Tensor; throws UserError in a build without CUDA.
void* cuda_alloc(std::size_t bytes);
void cuda_free(void* p);

// GPU choice of docs/DESIGN.md §5, as a pure function (unit-tested without a GPU): with one visible
// GPU (Slurm bound one per task, or ranks share it) use it; with at least as many GPUs as local
// ranks, local_rank; with fewer, an error when each rank needs its own GPU (NCCL), else blocks of
// consecutive local ranks share one (local_rank * visible / local_size).
int choose_gpu(int local_rank, int local_size, int visible, bool exclusive);

// cudaSetDevice + context creation: the first CUDA call that touches a device (build with CUDA).
void use_cuda_device(int index);
// Teardown step of main (after NCCL, before MPI_Finalize): releases this process's CUDA context
// if it created one. No-op in a build without CUDA.
void release_cuda_device();
// "NVIDIA H100 80GB HBM3 (pci 0000:1a:00.0)"; empty in a build without CUDA.
std::string cuda_device_description(int index);
// --print-env on a GPU: the CUDA runtime, cuBLAS, cuDNN and NCCL versions this process loaded,
// each next to the version it was built against, then one line per major version that differs
// (and a driver older than the runtime). Needs no GPU; empty in a build without CUDA.
std::vector<std::string> cuda_library_versions();

// Resolves --device: auto -> cuda when built with CUDA and a GPU is visible, else cpu. An explicit
// `cuda` that cannot be honoured is a UserError that says why.
Device resolve_device(DeviceChoice choice);

const char* to_string(Device d);

}  // namespace mnist_ddp
