// device.cpp — --device resolution (backend-independent part).
#include "mnist_ddp/device.hpp"

#include "mnist_ddp/check.hpp"

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

const char* to_string(Device d) {
  return d == Device::Cuda ? "cuda" : "cpu";
}

}  // namespace mnist_ddp
