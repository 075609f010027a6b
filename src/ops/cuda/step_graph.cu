// step_graph.cu — the CUDA backend's StepGraphs (ops/step_graph.hpp), made by
// CudaOps::make_step_graphs: capture a training step into a CUDA graph once per batch size and
// replay it; a capture that fails on any rank falls back to eager steps.
#include <cuda_runtime.h>

#include <exception>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/diagnostics/cuda/cuda_check.hpp"
#include "mnist_ddp/ops/cuda/capture.hpp"
#include "mnist_ddp/ops/step_graph.hpp"
#include "ops/cuda/cuda_ops.hpp"

namespace mnist_ddp {
namespace {
// Marks a capture failure that is an error to report on every rank, not a call to retry eagerly.
constexpr const char* kErrorTag = "error while capturing: ";

class CudaStepGraphs final : public StepGraphs {
 public:
  // inject_failure: the --debug-fail-capture test seam (a call that is illegal while capturing,
  // made inside every capture).
  CudaStepGraphs(cudaStream_t stream, CaptureHooks hooks, bool inject_failure)
      : stream_(stream), hooks_(std::move(hooks)), inject_failure_(inject_failure) {
    MNIST_DDP_CHECK(stream != nullptr, "CUDA graphs need the ops' stream");
    MNIST_DDP_CHECK(hooks_.save && hooks_.agree && hooks_.restore,
                    "CUDA graphs need capture hooks");
  }
  ~CudaStepGraphs() override {
    for (auto& [n, exec] : execs_) cudaGraphExecDestroy(exec);
  }
  CudaStepGraphs(const CudaStepGraphs&) = delete;
  CudaStepGraphs& operator=(const CudaStepGraphs&) = delete;

  StepRun run(std::int64_t n, const std::function<void()>& body) override;
  bool will_capture(std::int64_t n) const override {
    const auto eager = eager_runs_.find(n);
    return !execs_.contains(n) && !eager_only_.contains(n) && eager != eager_runs_.end() &&
           eager->second > 0;
  }
  int captured() const override { return static_cast<int>(execs_.size()); }
  const std::string& last_failure() const override { return last_failure_; }

 private:
  cudaStream_t stream_;
  CaptureHooks hooks_;
  bool inject_failure_;
  std::map<std::int64_t, int> eager_runs_;         // key -> eager steps so far
  std::map<std::int64_t, cudaGraphExec_t> execs_;  // key -> the captured step
  std::set<std::int64_t> eager_only_;              // keys whose capture failed
  std::string last_failure_;
};

StepRun CudaStepGraphs::run(std::int64_t n, const std::function<void()>& body) {
  cudaStream_t stream = stream_;
  if (auto it = execs_.find(n); it != execs_.end()) {
    CUDA_CHECK(cudaGraphLaunch(it->second, stream));
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

}  // namespace

namespace cuda_ops {

std::unique_ptr<StepGraphs> CudaOps::make_step_graphs(CaptureHooks hooks, bool inject_failure) {
  return std::make_unique<CudaStepGraphs>(stream_, std::move(hooks), inject_failure);
}

}  // namespace cuda_ops

}  // namespace mnist_ddp
