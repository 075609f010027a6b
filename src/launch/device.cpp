// device.cpp — --device resolution (backend-independent part).
#include "mnist_ddp/launch/device.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {

Device resolve_device(DeviceChoice choice) {
  switch (choice) {
    case DeviceChoice::Cpu:
      return Device::Cpu;
    case DeviceChoice::Auto:
      return cuda_built() && cuda_device_count() > 0 ? Device::Cuda : Device::Cpu;
    case DeviceChoice::Cuda:
      if (!cuda_built()) {
        throw UserError(
            "--device cuda: this mnist_ddp was built without CUDA. Rebuild with the CUDA backend "
            "(make clean && make USE_CUDA=1, needs nvcc and CUDA_HOME) or use --device cpu.");
      }
      if (cuda_device_count() == 0) {
        throw UserError(
            "--device cuda: no usable GPU is visible to this process (no driver, or "
            "CUDA_VISIBLE_DEVICES hides them). Run on a GPU node or use --device cpu.");
      }
      return Device::Cuda;
  }
  return Device::Cpu;
}

int choose_gpu(int local_rank, int local_size, int visible, bool exclusive) {
  if (visible <= 0) {
    throw UserError("--device cuda: no usable GPU is visible to this process");
  }
  if (visible == 1) return 0;
  if (local_size <= visible) return local_rank;
  if (exclusive) {
    throw UserError(fmt::format(
        "--comm nccl needs one GPU per rank, but {} ranks on this node see {} GPUs. Launch at most "
        "{} ranks per node, or use --comm mpi to let ranks share GPUs",
        local_size, visible, visible));
  }
  return static_cast<int>(static_cast<long>(local_rank) * visible / local_size);
}

bool nvidia_driver_installed() {
  // Loaded once and kept: the CUDA runtime loads the same library right after on a GPU node, and
  // unloading a driver library between the two is an initialisation and teardown for nothing.
  static const bool installed = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr;
  return installed;
}

const char* to_string(Device d) {
  return name_in(kDeviceNames, d);
}

}  // namespace mnist_ddp
