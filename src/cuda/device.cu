// device.cu — the CUDA side of device.hpp: GPU count (a machine without a driver has no GPU, it is
// not an error), device memory, selection and description.
#include <string>

#include "mnist_ddp/check.hpp"
#include "mnist_ddp/cuda_check.hpp"
#include "mnist_ddp/device.hpp"

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
  if (rc != cudaSuccess) {
    // cudaErrorInsufficientDriver / cudaErrorNoDevice: a CPU node. Clear the sticky error.
    cudaGetLastError();
    return 0;
  }
  return n;
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
