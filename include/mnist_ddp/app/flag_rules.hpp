// flag_rules.hpp — the values and flag combinations a run refuses, each with the one error that
// names the flags and the fix (flag_rules.cpp holds them as tables).
#pragma once

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/launch/device.hpp"

namespace mnist_ddp {

// After parsing, whatever the device: --init-weights with --resume or --eval-only, --eval-only
// without a checkpoint, one signal for two jobs, a malformed --trace-steps or --debug-slow, ...
// UserError naming the flags.
void check_flag_rules(const Config& cfg);

// The flag combinations the resolved device cannot run (PowerSGD / the thread engine / --comm mpi
// with hooks or post-local SGD on a GPU, --amp or --comm nccl on the CPU, ...): a UserError
// naming the flags and the fix. thread_multiple: whether MPI granted MPI_THREAD_MULTIPLE.
void check_flags_for_device(const Config& cfg, Device device, bool thread_multiple);

}  // namespace mnist_ddp
