// gpu_probe.cpp — the GPU tests' probe (gpu_probe.hpp).
#include "gpu_probe.hpp"

#include <cstdlib>
#include <cstring>

#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/launch/device.hpp"

namespace mnist_ddp::testing {

GpuState probe_gpu(std::string* why) {
  if (!cuda_built()) {
    *why = "built without CUDA (USE_CUDA=0)";
    return GpuState::Absent;
  }
  try {
    if (cuda_device_count() == 0) {
      *why = "no usable GPU (no NVIDIA driver, or no device visible)";
      return GpuState::Absent;
    }
  } catch (const UserError& e) {
    *why = e.what();
    return GpuState::Broken;
  }
  return GpuState::Available;
}

bool gpu_required() {
  const char* v = std::getenv("MNIST_DDP_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace mnist_ddp::testing
