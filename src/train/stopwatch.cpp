// stopwatch.cpp — the training clock.
#include "mnist_ddp/train/stopwatch.hpp"

namespace mnist_ddp {
namespace {
const std::chrono::steady_clock::time_point kProcessStart = std::chrono::steady_clock::now();
}  // namespace

double process_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - kProcessStart).count();
}

void Stopwatch::start() {
  if (running_) return;
  since_ = Clock::now();
  running_ = true;
}

void Stopwatch::stop() {
  if (!running_) return;
  total_ += std::chrono::duration<double>(Clock::now() - since_).count();
  running_ = false;
}

double Stopwatch::seconds() const {
  return running_ ? total_ + std::chrono::duration<double>(Clock::now() - since_).count() : total_;
}

}  // namespace mnist_ddp
