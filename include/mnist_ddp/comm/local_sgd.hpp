// local_sgd.hpp — post-local SGD's schedule in one place (PyTorch's post_localSGD_hook with
// PeriodicModelAverager): gradients averaged over the whole job for the first --local-sgd-start
// steps, then only within each node's group, with the parameters averaged over all ranks every
// --local-sgd-period steps from then on. Which communicator carries the groups is the
// communication plan's (app/plan_communication.hpp); the trainer asks this schedule at every step.
#pragma once

#include <cstdint>

namespace mnist_ddp {

struct LocalSgdSchedule {
  std::int64_t start = -1;  // the first step averaged within the node groups only; -1: off
  std::int64_t period = 4;  // steps between global parameter averages

  bool on() const { return start >= 0; }
  // Whether the step that starts at `step` (optimizer steps taken so far) averages its gradients
  // within the node groups rather than over all ranks.
  bool local_at(std::int64_t step) const;
  // Whether the parameters are averaged over all ranks after the step that started at `step`.
  bool average_after(std::int64_t step) const;
};

}  // namespace mnist_ddp
