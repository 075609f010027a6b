// comm_kernels.cu — device arithmetic shared by NcclComm and the host-staged communicator.
#include "comm/cuda/comm_kernels.hpp"

#include "mnist_ddp/diagnostics/cuda/cuda_check.hpp"

namespace mnist_ddp {
namespace {

__global__ void divide_kernel(float* x, std::size_t n, float by) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = x[i] / by;
}

}  // namespace

void divide_on_device(float* x, std::size_t n, float by, cudaStream_t stream) {
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>((n + 255) / 256);
  divide_kernel<<<blocks, 256, 0, stream>>>(x, n, by);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace mnist_ddp
