// step_graph.hpp — CUDA graphs of the training step, one per kind of step: its batch size (the
// last batch of an epoch may be smaller) and, with --accumulate, which micro-batch it is (the
// trainer's key). The first step of a size runs eagerly: it warms everything that
// allocates or chooses (cuDNN plans and workspace, cuBLAS, NCCL's first collectives). The second
// is captured on the ops' stream and launched; every later one is a single graph launch. The
// body must only enqueue work on that stream (and on communicators bound to it); what changes per
// step reaches the device through Ops::set_step_scalars before the step.
//
// A capture can fail (a library call that is illegal while capturing): then every rank, agreed,
// abandons it, puts the host-side step state back, runs that step eagerly and keeps that batch
// size eager for the rest of the run. Nothing aborts.
//
// The backend that has a stream makes them (Ops::make_step_graphs): the CUDA backend's
// implementation is the one definition (src/ops/cuda/step_graph.cu).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace mnist_ddp {

enum class StepRun { Eager, Captured, Replayed, FellBack };

// What the trainer provides so a failed capture is undone on every rank together.
struct CaptureHooks {
  // Before a capture: remember the host-side step state (counters, requests, bookkeeping).
  std::function<void()> save;
  // Collective: every rank passes its own failure ("" when it captured); returns "" when every
  // rank captured, else the same description of the first failure on every rank.
  std::function<std::string(const std::string&)> agree;
  // After an agreed failure: the host-side state back to what save() saw.
  std::function<void()> restore;
};

class StepGraphs {
 public:
  virtual ~StepGraphs() = default;
  // Runs the step of key n (the trainer's: batch size and micro-batch kind): body() eagerly, or
  // body() captured and then launched, or the captured graph launched (body not called), or, when
  // the capture failed on some rank, body() eagerly after hooks.restore(). Says which.
  virtual StepRun run(std::int64_t n, const std::function<void()>& body) = 0;
  // Whether run(n, ...) would capture now (its body then becomes a graph whose replays run no
  // host code): the timeline keeps that step's spans as the replays' template.
  virtual bool will_capture(std::int64_t n) const = 0;
  // Graphs captured so far.
  virtual int captured() const = 0;
  // The agreed description of the last failed capture ("" if none failed).
  virtual const std::string& last_failure() const = 0;
};

}  // namespace mnist_ddp
