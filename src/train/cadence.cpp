// cadence.cpp — the run's list of between-step actions (cadence.hpp).
#include "mnist_ddp/train/cadence.hpp"

#include <utility>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

bool is_due(const CadenceAction& a, std::int64_t step) {
  return a.every > 0 && step % a.every == 0;
}

}  // namespace

void RunCadence::add(CadenceAction action) {
  MNIST_DDP_CHECK(action.every >= 0 && action.run,
                  "cadence action '" + action.name + "': every must be >= 0 and run set");
  actions_.push_back(std::move(action));
}

int RunCadence::after_step(std::int64_t step) const {
  for (const CadenceAction& a : actions_) {
    if (!is_due(a, step)) continue;
    if (const int stop = a.run(step); stop != 0) return stop;
  }
  return 0;
}

std::vector<std::string> RunCadence::due(std::int64_t step) const {
  std::vector<std::string> names;
  for (const CadenceAction& a : actions_)
    if (is_due(a, step)) names.push_back(a.name);
  return names;
}

}  // namespace mnist_ddp
