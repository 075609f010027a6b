// device.cu — the CUDA side of device.hpp: GPU count (a machine without a driver or without a
// device has no GPU, which is not an error; a driver the runtime cannot use is), device memory,
// selection and description.
#include <string>

#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/diagnostics/cuda/cuda_check.hpp"
#include "mnist_ddp/launch/device.hpp"

namespace mnist_ddp {

namespace {
bool g_context = false;  // set by use_cuda_device; read by the teardown in main
}  // namespace

bool cuda_built() {
  return true;
}

int cuda_device_count() {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc == cudaSuccess) return n;
  cudaGetLastError();                     // clear the error for later calls
  if (rc == cudaErrorNoDevice) return 0;  // a driver, but no device visible (CUDA_VISIBLE_DEVICES)
  // Without a driver, the runtime's "driver insufficient" means "no GPU here"; with one, the driver
  // is too old for this runtime.
  if (rc == cudaErrorInsufficientDriver && !nvidia_driver_installed()) return 0;  // a CPU node
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  throw UserError(std::string("the NVIDIA driver cannot run this mnist_ddp's CUDA ") +
                  std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
                  " runtime: cudaGetDeviceCount: " + cudaGetErrorName(rc) + ": " +
                  cudaGetErrorString(rc) + " (driver supports CUDA " +
                  std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) +
                  "). Update the driver (nvidia-smi shows its CUDA version), run on a node with a "
                  "newer one, or use --device cpu");
}

void* cuda_alloc(std::size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes));
  CUDA_CHECK(cudaMemset(p, 0, bytes));
  return p;
}

void cuda_free(void* p) {
  if (p != nullptr) CUDA_CHECK(cudaFree(p));
}

void use_cuda_device(int index) {
  CUDA_CHECK(cudaSetDevice(index));
  CUDA_CHECK(cudaFree(nullptr));  // creates the context now, on the chosen device
  g_context = true;
}

void release_cuda_device() {
  if (g_context) CUDA_CHECK(cudaDeviceReset());
  g_context = false;
}

std::string cuda_device_description(int index) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  char bus[32] = {0};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, index));
  return std::string(prop.name) + " (pci " + bus + ")";
}

}  // namespace mnist_ddp
