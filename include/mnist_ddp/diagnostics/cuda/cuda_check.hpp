// cuda_check.hpp — one check macro per GPU library (CUDA runtime, cuDNN, cuBLAS, NCCL): each
// evaluates its expression once and, on failure, prints the expression, file:line, rank, host and
// the library's own error string, then aborts the whole job. Inside a ThrowOnCheckFailure scope
// (a CUDA graph capture) a failure throws CheckFailure instead, so the capture can be abandoned.
// For the CUDA sources (src/*/cuda/*.cu) of every folder and the CUDA tests: public so that all may
// include it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

namespace mnist_ddp {

// A failed check inside a ThrowOnCheckFailure scope; what() names the call and the error.
class CheckFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// While alive, failed checks on this thread throw CheckFailure instead of aborting the job (the
// capture of a step: a call that is illegal while capturing must not end every rank). Nests.
class ThrowOnCheckFailure {
 public:
  ThrowOnCheckFailure();
  ~ThrowOnCheckFailure();
  ThrowOnCheckFailure(const ThrowOnCheckFailure&) = delete;
  ThrowOnCheckFailure& operator=(const ThrowOnCheckFailure&) = delete;

 private:
  bool previous_;
};

[[noreturn]] void fail_cuda(cudaError_t rc, const char* expr, const char* file, int line);
[[noreturn]] void fail_cudnn(cudnnStatus_t rc, const char* expr, const char* file, int line);
[[noreturn]] void fail_cublas(cublasStatus_t rc, const char* expr, const char* file, int line);
// NCCL failures also report ncclGetLastError; given a communicator, it is aborted first
// (ncclCommAbort releases the peers blocked in a collective with it), unless the failure is
// thrown (inside a ThrowOnCheckFailure scope nothing ran on the communicator).
[[noreturn]] void fail_nccl(ncclResult_t rc, const char* expr, const char* file, int line,
                            ncclComm_t comm = nullptr);

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

#define NCCL_CHECK(expr) NCCL_COMM_CHECK(expr, nullptr)

// NCCL_CHECK for a call on an existing communicator: a failure aborts it first.
#define NCCL_COMM_CHECK(expr, comm)                                               \
  do {                                                                            \
    const ncclResult_t mnist_ddp_nccl_ = (expr);                                  \
    if (mnist_ddp_nccl_ != ncclSuccess && mnist_ddp_nccl_ != ncclInProgress)      \
      ::mnist_ddp::fail_nccl(mnist_ddp_nccl_, #expr, __FILE__, __LINE__, (comm)); \
  } while (0)
