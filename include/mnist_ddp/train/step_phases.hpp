// step_phases.hpp — where a training step's time goes: each step split into data (gather the
// batch, broadcast BN buffers), forward (+ loss), backward (with the bucket all-reduces started
// inside it), exposed communication (waiting for the all-reduces after backward) and the optimizer,
// timed on the host at the phase boundaries of the step's one assembly (StepEngine::enqueue).
// Each epoch reports the median of every phase over its steps. Host clocks time a CPU step; on a
// GPU they would time the enqueue, so a GPU step is timed by the timeline's CUDA events instead
// (trace.hpp), on a sample of the steps: phase_seconds_of turns its spans into phases.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <vector>

#include "mnist_ddp/base/enum_names.hpp"
#include "mnist_ddp/trace/trace.hpp"

namespace mnist_ddp {

enum class Phase { Data, Forward, Backward, Comm, Optimizer };
inline constexpr std::size_t kPhases = 5;
inline constexpr std::array<NameOf<Phase>, kPhases> kPhaseNames{{{Phase::Data, "data"},
                                                                 {Phase::Forward, "forward"},
                                                                 {Phase::Backward, "backward"},
                                                                 {Phase::Comm, "comm"},
                                                                 {Phase::Optimizer, "optimizer"}}};

// Seconds per phase, indexed by Phase.
using PhaseSeconds = std::array<double, kPhases>;

// A step's phases from its timeline spans (one step or micro-batch): "data"; "forward <layer>" and
// "loss" (forward); "backward <layer>"; "wait for gradients" (exposed communication);
// "optimizer". Other spans (the step itself, communication lanes) count nowhere.
PhaseSeconds phase_seconds_of(const std::vector<TraceEvent>& spans);

class StepPhases {
 public:
  using Clock = std::chrono::steady_clock;
  // A step starts now.
  void begin();
  // Phase p ended now (it began at the previous mark, or at begin()). Phases are marked in order;
  // a phase not marked in a step counts 0 for it.
  void mark(Phase p);
  // A blocking collective inside a phase (the BN-buffer broadcast inside data): the time between
  // the two counts as Comm (waiting for the other ranks), not as the phase around it.
  void begin_wait();
  void end_wait();
  // The step ended: its phases join the samples.
  void end();
  // The phases of the step that ended (or was added) last.
  const PhaseSeconds& last() const { return last_step_; }
  // A step timed elsewhere (a GPU step's CUDA events) joins the samples.
  void add(const PhaseSeconds& step);
  std::size_t steps() const { return samples_[0].size(); }
  // The median of each phase over the steps since the last take (zeros when none); clears them.
  PhaseSeconds take_medians();

 private:
  Clock::time_point last_{};
  Clock::time_point wait_begin_{};
  double waited_ = 0;  // seconds moved to Comm since the previous mark
  PhaseSeconds current_{};
  PhaseSeconds last_step_{};
  std::array<std::vector<double>, kPhases> samples_;
};

}  // namespace mnist_ddp
