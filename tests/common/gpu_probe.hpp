// gpu_probe.hpp — whether this test process can run GPU tests, shared by the unit and MPI suites.
// No GPU (a CPU-only build, no driver, no device) skips a GPU test with the reason, unless GPU
// tests are required (MNIST_DDP_REQUIRE_GPU=1: tests/mpi_env.sh sets it when `nvidia-smi -L`
// lists a device, and the GPU suite always does), where it fails. A broken setup (a driver too
// old for the runtime) always fails: it is not "no GPU".
#pragma once

#include <string>

namespace mnist_ddp::testing {

enum class GpuState { Available, Absent, Broken };

// The state, and in *why the reason when not Available.
GpuState probe_gpu(std::string* why);
// MNIST_DDP_REQUIRE_GPU is "1".
bool gpu_required();

}  // namespace mnist_ddp::testing

// First statement of a GPU test: skips it (with the reason) where no GPU is expected, fails it
// where one is required or the setup is broken.
#define SKIP_WITHOUT_GPU()                                                        \
  do {                                                                            \
    std::string mnist_ddp_why_;                                                   \
    const auto mnist_ddp_gpu_ = ::mnist_ddp::testing::probe_gpu(&mnist_ddp_why_); \
    if (mnist_ddp_gpu_ == ::mnist_ddp::testing::GpuState::Broken)                 \
      FAIL() << "GPU setup broken: " << mnist_ddp_why_;                           \
    if (mnist_ddp_gpu_ == ::mnist_ddp::testing::GpuState::Absent) {               \
      if (::mnist_ddp::testing::gpu_required())                                   \
        FAIL() << "MNIST_DDP_REQUIRE_GPU=1 but " << mnist_ddp_why_;               \
      GTEST_SKIP() << mnist_ddp_why_;                                             \
    }                                                                             \
  } while (0)
