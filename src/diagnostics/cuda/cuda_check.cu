// cuda_check.cu — error reporting for the CUDA runtime, cuDNN, cuBLAS and NCCL: fatal for the
// job, or a thrown CheckFailure inside a ThrowOnCheckFailure scope (a graph capture).
#include <string>

#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/diagnostics/cuda/cuda_check.hpp"

namespace mnist_ddp {
namespace {

thread_local bool t_throw_on_failure = false;

[[noreturn]] void fail(const std::string& what, const char* file, int line) {
  if (t_throw_on_failure) {
    throw CheckFailure(what + " (" + file + ":" + std::to_string(line) + ")");
  }
  fail_internal(what, file, line);
}

}  // namespace

ThrowOnCheckFailure::ThrowOnCheckFailure() : previous_(t_throw_on_failure) {
  t_throw_on_failure = true;
}
ThrowOnCheckFailure::~ThrowOnCheckFailure() {
  t_throw_on_failure = previous_;
}

[[noreturn]] void fail_cuda(cudaError_t rc, const char* expr, const char* file, int line) {
  fail(std::string("CUDA error in ") + expr + ": " + cudaGetErrorName(rc) + ": " +
           cudaGetErrorString(rc),
       file, line);
}

[[noreturn]] void fail_cudnn(cudnnStatus_t rc, const char* expr, const char* file, int line) {
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  fail(std::string("cuDNN error in ") + expr + ": " + cudnnGetErrorString(rc) +
           (last[0] ? std::string(" (") + last + ")" : std::string()),
       file, line);
}

[[noreturn]] void fail_cublas(cublasStatus_t rc, const char* expr, const char* file, int line) {
  fail(std::string("cuBLAS error in ") + expr + ": " + cublasGetStatusName(rc) + ": " +
           cublasGetStatusString(rc),
       file, line);
}

[[noreturn]] void fail_nccl(ncclResult_t rc, const char* expr, const char* file, int line,
                            ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  const std::string what = std::string("NCCL error in ") + expr + ": " + ncclGetErrorString(rc) +
                           " (last: " + (last != nullptr ? last : "") + ")";
  // Fatal: abort the communicator first, so peers blocked in a collective with this rank are
  // released (MPI_Abort alone could leave them spinning on the GPU).
  if (!t_throw_on_failure && comm != nullptr) ncclCommAbort(comm);
  fail(what, file, line);
}

}  // namespace mnist_ddp
