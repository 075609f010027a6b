// step_phases.cpp — per-phase step timing and its per-epoch medians.
#include "mnist_ddp/train/step_phases.hpp"

#include <algorithm>

namespace mnist_ddp {

void StepPhases::begin() {
  current_.fill(0);
  last_ = Clock::now();
}

void StepPhases::mark(Phase p) {
  const Clock::time_point now = Clock::now();
  current_[static_cast<std::size_t>(p)] += std::chrono::duration<double>(now - last_).count();
  last_ = now;
}

void StepPhases::end() {
  for (std::size_t i = 0; i < kPhases; ++i) samples_[i].push_back(current_[i]);
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
