// step_graph.hpp — CUDA graphs of the training step, one per batch size (the last batch of an
// epoch may be smaller). The first step of a size runs eagerly: it warms everything that
// allocates or chooses (cuDNN plans and workspace, cuBLAS, NCCL's first collectives). The second
// is captured on the ops' stream and launched; every later one is a single graph launch. The
// body must only enqueue work on that stream (and on communicators bound to it); what changes per
// step reaches the device through Ops::set_step_scalars before the step.
#pragma once

#include <functional>
#include <map>

namespace mnist_ddp {

enum class StepRun { Eager, Captured, Replayed };

class StepGraphs {
 public:
  // stream: Ops::stream() (a cudaStream_t). A "built without CUDA" UserError in a CPU-only build.
  explicit StepGraphs(void* stream);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Runs the step for batch size n: body() eagerly, or body() captured and then launched, or the
  // captured graph launched (body not called). Says which.
  StepRun run(int n, const std::function<void()>& body);
  // Graphs captured so far.
  int captured() const { return static_cast<int>(execs_.size()); }

 private:
  void* stream_;
  std::map<int, int> eager_runs_;  // batch size -> eager steps so far
  std::map<int, void*> execs_;     // batch size -> cudaGraphExec_t
};

}  // namespace mnist_ddp
