// stopwatch.hpp — the training clock: accumulates the intervals between start() and stop(), so
// evaluation and checkpoints stay outside the images/s figures.
#pragma once

#include <chrono>

namespace mnist_ddp {

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
