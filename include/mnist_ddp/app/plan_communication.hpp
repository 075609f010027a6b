// plan_communication.hpp — the run's communication plan (its shape, the CommPlan struct:
// comm/comm_plan.hpp), decided in one place from the configuration and the placement: which
// communicator carries the gradients, whether the CPU's communication thread runs, which
// communicator post-local SGD groups use, and whether training steps are captured in CUDA graphs
// (and why not). Every call site that opens a communicator or picks a path reads it.
#pragma once

#include <string>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/comm/comm_plan.hpp"
#include "mnist_ddp/launch/device.hpp"

namespace mnist_ddp {

// Pure: the plan for this configuration on `device` in a world of `world_size` ranks (the
// host-staged all-reduce needs the host inside each step only when there are peers). The
// configuration has passed check_flags_for_device (no thread engine on a GPU, no PowerSGD on a
// GPU, no thread with post-local SGD).
CommPlan plan_communication(const Config& cfg, Device device, int world_size);

}  // namespace mnist_ddp
