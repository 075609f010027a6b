// dry_run.hpp — --dry-run's end: after every check a run makes before its first step has passed
// (flags, data, the checkpoint directory's lock and writability, launcher, devices, communicators,
// the start state), the plan of the run it would be, in the log, instead of training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/app/plan_communication.hpp"
#include "mnist_ddp/app/setup.hpp"
#include "mnist_ddp/data/dataset.hpp"
#include "mnist_ddp/diagnostics/log.hpp"
#include "mnist_ddp/launch/identity.hpp"

namespace mnist_ddp {

class Trainer;

// What the plan is made of (all known on every rank once the start state is restored).
struct RunShape {
  int world = 1;
  int nodes = 1;
  std::string device;            // "cpu", "cuda:0 ..." (rank 0's)
  std::int64_t first_step = 0;   // the step training continues from
  std::int64_t total_steps = 0;  // after --max-steps
  std::int64_t steps_per_epoch = 0;
  std::int64_t train_images = 0;  // the training split
  std::int64_t test_images = 0;
  std::string log_path, metrics_path;
};

// The shape of the run that is set up: this rank's view of identity, placement, trainer and data.
RunShape run_shape(const Identity& id, const Placement& where, const Trainer& trainer,
                   const DataSplit& data, const Logger& log);

// Pure: the steps (in (first_step, total_steps]) a run writes a checkpoint at: every
// --checkpoint-every, each epoch's end, and the last step.
std::vector<std::int64_t> planned_checkpoint_steps(const Config& cfg, const RunShape& run);

// Pure: the plan's lines: steps and epochs, batches per rank, evaluation, checkpoints, where the
// outputs go, the communication plan.
std::vector<std::string> dry_run_plan(const Config& cfg, const RunShape& run, const CommPlan& plan);

// Rank 0: the plan in the log (console and mnist_train.log). Returns the exit status (0).
int report_dry_run(const Config& cfg, const RunShape& run, const CommPlan& plan, Logger& log);

}  // namespace mnist_ddp
