// step_graph.cu — StepGraphs: capture a training step into a CUDA graph once per batch size and
// replay it (step_graph.hpp).
#include <cuda_runtime.h>

#include "mnist_ddp/check.hpp"
#include "mnist_ddp/cuda_check.hpp"
#include "mnist_ddp/step_graph.hpp"

namespace mnist_ddp {

StepGraphs::StepGraphs(void* stream) : stream_(stream) {
  MNIST_DDP_CHECK(stream != nullptr, "CUDA graphs need the ops' stream");
}

StepGraphs::~StepGraphs() {
  for (auto& [n, exec] : execs_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

StepRun StepGraphs::run(int n, const std::function<void()>& body) {
  auto* stream = static_cast<cudaStream_t>(stream_);
  if (auto it = execs_.find(n); it != execs_.end()) {
    CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(it->second), stream));
    return StepRun::Replayed;
  }
  if (eager_runs_[n]++ == 0) {
    body();  // warm-up: plans, workspaces and NCCL's lazy setup happen outside any capture
    return StepRun::Eager;
  }
  // Thread-local capture: NCCL's proxy thread may make CUDA calls while this thread captures.
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    body();
  } catch (...) {
    // End the capture so the stream is usable (and the error reported) rather than poisoned.
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);
    if (broken != nullptr) cudaGraphDestroy(broken);
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t rc = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(rc);
  execs_[n] = exec;
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  return StepRun::Captured;
}

}  // namespace mnist_ddp
