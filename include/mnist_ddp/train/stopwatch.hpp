// stopwatch.hpp — the training clock: accumulates the intervals between start() and stop(), so
// evaluation and checkpoints stay outside the images/s figures; and the process's own age (the
// wall time a run's totals add up).
#pragma once

#include <chrono>

namespace mnist_ddp {

// Wall-clock seconds since this process started (steady clock, taken at static initialisation).
double process_seconds();

class Stopwatch {
 public:
  void start();  // no-op while running
  void stop();   // adds the running interval; no-op while stopped
  // The total so far, a running interval included.
  double seconds() const;
  bool running() const { return running_; }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point since_{};
  double total_ = 0;
  bool running_ = false;
};

}  // namespace mnist_ddp
