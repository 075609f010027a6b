// cuda_check.hpp — one check macro per GPU library (CUDA runtime, cuDNN, cuBLAS, NCCL): each
// evaluates its expression once and, on failure, prints the expression, file:line, rank, host and
// the library's own error string, then aborts the whole job. Included only by src/cuda/*.cu.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

namespace mnist_ddp {

[[noreturn]] void fail_cuda(cudaError_t rc, const char* expr, const char* file, int line);
[[noreturn]] void fail_cudnn(cudnnStatus_t rc, const char* expr, const char* file, int line);
[[noreturn]] void fail_cublas(cublasStatus_t rc, const char* expr, const char* file, int line);
// NCCL failures also report ncclGetLastError and abort the communicator first when given.
[[noreturn]] void fail_nccl(ncclResult_t rc, const char* expr, const char* file, int line);

}  // namespace mnist_ddp

#define CUDA_CHECK(expr)                                                \
  do {                                                                  \
    const cudaError_t mnist_ddp_cu_ = (expr);                           \
    if (mnist_ddp_cu_ != cudaSuccess)                                   \
      ::mnist_ddp::fail_cuda(mnist_ddp_cu_, #expr, __FILE__, __LINE__); \
  } while (0)

#define CUDNN_CHECK(expr)                                                 \
  do {                                                                    \
    const cudnnStatus_t mnist_ddp_dnn_ = (expr);                          \
    if (mnist_ddp_dnn_ != CUDNN_STATUS_SUCCESS)                           \
      ::mnist_ddp::fail_cudnn(mnist_ddp_dnn_, #expr, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(expr)                                                  \
  do {                                                                      \
    const cublasStatus_t mnist_ddp_blas_ = (expr);                          \
    if (mnist_ddp_blas_ != CUBLAS_STATUS_SUCCESS)                           \
      ::mnist_ddp::fail_cublas(mnist_ddp_blas_, #expr, __FILE__, __LINE__); \
  } while (0)

#define NCCL_CHECK(expr)                                                     \
  do {                                                                       \
    const ncclResult_t mnist_ddp_nccl_ = (expr);                             \
    if (mnist_ddp_nccl_ != ncclSuccess && mnist_ddp_nccl_ != ncclInProgress) \
      ::mnist_ddp::fail_nccl(mnist_ddp_nccl_, #expr, __FILE__, __LINE__);    \
  } while (0)
