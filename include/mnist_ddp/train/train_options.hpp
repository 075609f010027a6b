// train_options.hpp — what the trainer is told, one small struct per concern: the schedule of
// steps over the data, the optimizer and its learning rate, how gradients travel, what is done
// between steps, checkpoints, what a stop does, and the test seams. The app layer's option table
// (app/flags.cpp) fills these fields from the flags directly, so the trainer reads the settings it
// uses and nothing looks up to the command line; each initialiser below is its flag's default,
// written once. A value the program derives (the straggler window from --log-every, SGD's rate
// from the schedule, PowerSGD's seed from --seed) is derived where it is used.
#pragma once

#include <csignal>
#include <cstdint>
#include <optional>
#include <string>

#include "mnist_ddp/base/amp_mode.hpp"
#include "mnist_ddp/base/choices.hpp"
#include "mnist_ddp/comm/local_sgd.hpp"
#include "mnist_ddp/comm/powersgd.hpp"
#include "mnist_ddp/model/optimizer.hpp"
#include "mnist_ddp/train/test_seams.hpp"

namespace mnist_ddp {

// How the run walks the training data: epochs and steps, batches, the sampler's order.
struct ScheduleOptions {
  int epochs = 2;
  std::int64_t max_steps = 0;  // 0: no limit
  int batch_size = 100;        // per rank and micro-batch
  int accumulate = 1;          // micro-batches per optimizer step
  int eval_batch_size = 500;   // per rank
  std::uint64_t seed = 42;     // the sampler's shuffle; recorded in checkpoints
  bool shuffle = true;
  bool drop_last = false;
};

// The optimizer: SGD's update rule, and the learning rate's schedule (--lr is lr.base_lr; its
// total_steps is the trainer's, after --max-steps; sgd.lr is unused: each step's rate comes from
// the schedule, Ops::set_step_scalars).
struct OptimizerOptions {
  SgdParams sgd{.momentum = 0.9};
  LrConfig lr;
};

// How the gradients are reduced: buckets, overlap with backward, compression (PowerSGD's own
// settings), SyncBatchNorm, post-local SGD's schedule, and mixed precision.
struct GradientOptions {
  int bucket_cap_kb = 25;  // gives this model 3 buckets: fc (61 KiB), layer2 (50 KiB), layer1
  bool overlap = true;     // false: --no-overlap, one all-reduce after backward
  Compression compression = Compression::None;
  // rank, start, minimum rate (its seed is --seed's, set by the trainer; batched/fp16 come from
  // the hook)
  PowerSgdConfig powersgd;
  bool sync_bn = false;
  LocalSgdSchedule local_sgd;  // off: start -1
  AmpMode amp = AmpMode::Off;
};

// What happens between steps, every this many steps (0: never, except where noted).
struct CadenceOptions {
  std::int64_t eval_every = 0;        // 0: at each epoch's end only
  std::int64_t log_every = 50;        // the progress window
  std::int64_t check_replicas = 0;    // the replica consistency check
  std::int64_t straggler_every = -1;  // straggler windows; -1: --log-every's; 0: off
  double straggler_threshold = 0.7;   // a rank scoring below this two windows running is slow
};

// Where checkpoints go and how many are kept.
struct CheckpointOptions {
  std::string dir = "checkpoints";
  std::int64_t every = 0;  // steps; 0: only at epoch ends and at the end
  int keep = 3;
  bool keep_best = false;
};

// What a stop signal does (process/requeue.hpp decide_stop).
struct StopOptions {
  bool requeue = false;
  int requeue_signal = SIGUSR1;
};

struct TrainOptions {
  ScheduleOptions schedule;
  OptimizerOptions optimizer;
  GradientOptions gradients;
  CadenceOptions cadence;
  CheckpointOptions checkpoint;
  StopOptions stop;
  SeamOptions seams;
};

}  // namespace mnist_ddp
