// step_phases.cpp — per-phase step timing and its per-epoch medians.
#include "mnist_ddp/train/step_phases.hpp"

#include <algorithm>
#include <string_view>

namespace mnist_ddp {

void StepPhases::begin() {
  current_.fill(0);
  waited_ = 0;
  last_ = Clock::now();
}

void StepPhases::mark(Phase p) {
  const Clock::time_point now = Clock::now();
  current_[static_cast<std::size_t>(p)] +=
      std::chrono::duration<double>(now - last_).count() - waited_;
  waited_ = 0;
  last_ = now;
}

void StepPhases::begin_wait() {
  wait_begin_ = Clock::now();
}

void StepPhases::end_wait() {
  const double w = std::chrono::duration<double>(Clock::now() - wait_begin_).count();
  current_[static_cast<std::size_t>(Phase::Comm)] += w;
  waited_ += w;
}

void StepPhases::end() {
  add(current_);
}

void StepPhases::add(const PhaseSeconds& step) {
  for (std::size_t i = 0; i < kPhases; ++i) samples_[i].push_back(step[i]);
  last_step_ = step;
}

PhaseSeconds phase_seconds_of(const std::vector<TraceEvent>& spans) {
  PhaseSeconds out{};
  const auto add = [&](Phase p, const TraceEvent& e) {
    out[static_cast<std::size_t>(p)] += 1e-6 * e.dur_us;
  };
  for (const TraceEvent& e : spans) {
    if (e.track != Track::Compute || e.dur_us < 0) continue;
    const std::string_view name = e.name;
    if (name == "data") {
      add(Phase::Data, e);
    } else if (name.starts_with("forward ") || name == "loss") {
      add(Phase::Forward, e);
    } else if (name.starts_with("backward ")) {
      add(Phase::Backward, e);
    } else if (name == "wait for gradients") {
      add(Phase::Comm, e);
    } else if (name == "optimizer") {
      add(Phase::Optimizer, e);
    }
  }
  return out;
}

PhaseSeconds StepPhases::take_medians() {
  PhaseSeconds out{};
  for (std::size_t i = 0; i < kPhases; ++i) {
    std::vector<double>& s = samples_[i];
    if (s.empty()) continue;
    const std::size_t mid = s.size() / 2;
    std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(mid), s.end());
    out[i] = s[mid];
    if (s.size() % 2 == 0) {
      // Even count: the mean of the two middle values (the lower one is the largest below mid).
      out[i] =
          (out[i] + *std::max_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
    }
    s.clear();
  }
  return out;
}

}  // namespace mnist_ddp
