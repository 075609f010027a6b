// cuda_stub.cpp — linked instead of the CUDA sources (src/*/cuda/) in a CPU-only build
// (USE_CUDA=0): the CUDA seam answers "built without CUDA" instead of the binary failing to link or
// to start.
#include <memory>
#include <string>
#include <vector>

#include "mnist_ddp/dist/comm.hpp"
#include "mnist_ddp/model/amp.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/ops/step_graph.hpp"
#include "mnist_ddp/runtime/check.hpp"
#include "mnist_ddp/runtime/device.hpp"

namespace mnist_ddp {

bool cuda_built() {
  return false;
}
int cuda_device_count() {
  return 0;
}
void* cuda_alloc(std::size_t) {
  throw UserError("this mnist_ddp was built without CUDA; device memory is unavailable");
}
void cuda_free(void*) {}
void use_cuda_device(int) {
  throw UserError("this mnist_ddp was built without CUDA");
}
std::string cuda_device_description(int) {
  return "";
}
std::vector<std::string> cuda_library_versions() {
  return {};
}
void release_cuda_device() {}
std::unique_ptr<Comm> make_host_staged_comm() {
  throw UserError("--comm mpi with --device cuda: this mnist_ddp was built without CUDA");
}
std::unique_ptr<Comm> make_host_staged_group_comm(int) {
  throw UserError("--comm mpi with --device cuda: this mnist_ddp was built without CUDA");
}
std::unique_ptr<Comm> make_nccl_group_comm(int) {
  throw UserError("--local-sgd-start on a GPU: this mnist_ddp was built without CUDA");
}
std::unique_ptr<Comm> make_nccl_comm() {
  throw UserError("--comm nccl: this mnist_ddp was built without CUDA (make USE_CUDA=1)");
}
void destroy_graph_exec(void*) {}
StepRun StepGraphs::run(std::int64_t, const std::function<void()>&) {
  throw UserError("--cuda-graphs: this mnist_ddp was built without CUDA");
}
std::unique_ptr<GradScaler> make_grad_scaler(Ops&, const LossScaleRule&) {
  throw UserError("--amp: this mnist_ddp was built without CUDA (mixed precision is GPU-only)");
}
std::unique_ptr<Ops> make_cuda_ops(bool) {
  throw UserError(
      "this mnist_ddp was built without CUDA (make USE_CUDA=1 to build the GPU backend)");
}

}  // namespace mnist_ddp
