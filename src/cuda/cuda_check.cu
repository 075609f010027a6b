// cuda_check.cu — fatal-error reporting for the CUDA runtime, cuDNN, cuBLAS and NCCL.
#include <string>

#include "mnist_ddp/check.hpp"
#include "mnist_ddp/cuda_check.hpp"

namespace mnist_ddp {

[[noreturn]] void fail_cuda(cudaError_t rc, const char* expr, const char* file, int line) {
  fail_internal(std::string("CUDA error in ") + expr + ": " + cudaGetErrorName(rc) + ": " +
                    cudaGetErrorString(rc),
                file, line);
}

[[noreturn]] void fail_cudnn(cudnnStatus_t rc, const char* expr, const char* file, int line) {
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  fail_internal(std::string("cuDNN error in ") + expr + ": " + cudnnGetErrorString(rc) +
                    (last[0] ? std::string(" (") + last + ")" : std::string()),
                file, line);
}

[[noreturn]] void fail_cublas(cublasStatus_t rc, const char* expr, const char* file, int line) {
  fail_internal(std::string("cuBLAS error in ") + expr + ": " + cublasGetStatusName(rc) + ": " +
                    cublasGetStatusString(rc),
                file, line);
}

[[noreturn]] void fail_nccl(ncclResult_t rc, const char* expr, const char* file, int line) {
  fail_internal(std::string("NCCL error in ") + expr + ": " + ncclGetErrorString(rc) +
                    " (last: " + ncclGetLastError(nullptr) + ")",
                file, line);
}

}  // namespace mnist_ddp
