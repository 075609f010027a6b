// step_graph.cu — StepGraphs: capture a training step into a CUDA graph once per batch size and
// replay it; a capture that fails on any rank falls back to eager steps (step_graph.hpp).
#include <cuda_runtime.h>

#include <exception>
#include <string>

#include "diagnostics/cuda/cuda_check.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/ops/step_graph.hpp"
#include "ops/cuda/capture.hpp"

namespace mnist_ddp {
namespace {
// Marks a capture failure that is an error to report on every rank, not a call to retry eagerly.
constexpr const char* kErrorTag = "error while capturing: ";
}  // namespace

void destroy_graph_exec(void* exec) {
  cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

StepRun StepGraphs::run(std::int64_t n, const std::function<void()>& body) {
  auto* stream = static_cast<cudaStream_t>(stream_);
  if (auto it = execs_.find(n); it != execs_.end()) {
    CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(it->second), stream));
    return StepRun::Replayed;
  }
  if (eager_only_.contains(n) || eager_runs_[n]++ == 0) {
    body();  // warm-up: plans, workspaces and NCCL's lazy setup happen outside any capture
    return StepRun::Eager;
  }
  hooks_.save();
  std::string failure;
  std::exception_ptr error;  // an error that is not a failed library call: reported, not retried
  cudaGraphExec_t exec = nullptr;
  try {
    // Failed checks throw here (CheckFailure) instead of aborting: the step can still run eagerly.
    ThrowOnCheckFailure throw_scope;
    // Thread-local capture: NCCL's proxy thread may make CUDA calls while this thread captures.
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    body();
    if (inject_failure_) {
      // Test seam (--debug-fail-capture): a synchronisation is illegal while capturing.
      CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    const cudaError_t rc = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(rc);
  } catch (const CheckFailure& e) {
    failure = e.what();
    abandon_capture(stream);
    exec = nullptr;
  } catch (const std::exception& e) {
    // Not a failed library call (a UserError, say): end the capture so the stream is usable, and
    // still take part in the agreement below, so the other ranks are not left waiting in it.
    abandon_capture(stream);
    failure = std::string(kErrorTag) + e.what();
    error = std::current_exception();
  }
  // Collective (host): every rank learns whether every rank captured this batch size.
  const std::string verdict = hooks_.agree(failure);
  if (!verdict.empty()) {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    hooks_.restore();
    if (error) std::rethrow_exception(error);
    // Another rank hit an error (not a failed call) while capturing: every rank stops with it.
    if (verdict.find(kErrorTag) != std::string::npos) throw UserError("CUDA graphs: " + verdict);
    eager_only_.insert(n);
    last_failure_ = verdict;
    body();
    return StepRun::FellBack;
  }
  execs_[n] = exec;
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  return StepRun::Captured;
}

}  // namespace mnist_ddp
