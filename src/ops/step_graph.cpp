// step_graph.cpp — StepGraphs' host side: its checks, the capture decision, and freeing the
// graphs through the CUDA seam; run() (the capture and the replays) is src/ops/cuda/step_graph.cu.
#include "mnist_ddp/ops/step_graph.hpp"

#include <utility>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {

StepGraphs::StepGraphs(void* stream, CaptureHooks hooks, bool inject_failure)
    : stream_(stream), hooks_(std::move(hooks)), inject_failure_(inject_failure) {
  MNIST_DDP_CHECK(stream != nullptr, "CUDA graphs need the ops' stream");
  MNIST_DDP_CHECK(hooks_.save && hooks_.agree && hooks_.restore, "CUDA graphs need capture hooks");
}

StepGraphs::~StepGraphs() {
  for (auto& [n, exec] : execs_) destroy_graph_exec(exec);
}

bool StepGraphs::will_capture(std::int64_t n) const {
  const auto eager = eager_runs_.find(n);
  return !execs_.contains(n) && !eager_only_.contains(n) && eager != eager_runs_.end() &&
         eager->second > 0;
}

}  // namespace mnist_ddp
