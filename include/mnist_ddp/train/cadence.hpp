// cadence.hpp — what a run does between its steps, as one list: each action with how often it is
// due (every N steps) and what it does, run in the order listed after each step, the first that
// stops the run ending that step's list. The trainer's list (trainer.cpp, make_cadence): the
// replica check, the live progress line, the log window, the straggler window, the agreed stop,
// the evaluation and the checkpoint. Pure bookkeeping, tested with fake actions
// (tests/unit/cadence_test.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mnist_ddp {

struct CadenceAction {
  std::string name;    // for tests and errors: "log window"
  std::int64_t every;  // due after the steps that are a multiple of it; 1: every step; 0: never
  // What it does after step `step` (optimizer steps taken so far). Returns 0 to go on, or a stop
  // signal that ends the run here: the actions after it are not run for this step.
  std::function<int(std::int64_t step)> run;
};

class RunCadence {
 public:
  void add(CadenceAction action);
  // After step `step`: every action due, in the order added. Returns the first stop signal an
  // action returned (0: the run goes on).
  int after_step(std::int64_t step) const;
  // The names of the actions due after step `step`, in order (what after_step would run if none
  // stopped).
  std::vector<std::string> due(std::int64_t step) const;

 private:
  std::vector<CadenceAction> actions_;
};

}  // namespace mnist_ddp
