// run_record.hpp — the small record of a run the trainer's loop and its step engine share: where
// the run is (step, epoch, position in the epoch), what it has done (images, micro-batches, graph
// replays, skipped fp16 steps), the current log window, the best evaluation so far and the totals
// of the processes before this one (a resumed run's). Plain data: the step engine counts into it,
// the run loop's cadence reads it, a checkpoint saves it.
#pragma once

#include <cstdint>

namespace mnist_ddp {

struct RunRecord {
  // Where the run is.
  std::int64_t step = 0;  // the step counter: optimizer steps taken (resumed ones included)
  std::int64_t epoch = 0;
  std::int64_t offset = 0;  // samples of `epoch` this rank has consumed
  double last_lr = 0;       // the learning rate of the last step
  // What this process has done.
  std::int64_t images = 0;         // global training images of this run
  std::int64_t micro_batches = 0;  // run since the last communication report (--accumulate)
  std::int64_t micro_runs = 0;     // micro-batches run in this run (a step each without it)
  std::int64_t replays = 0;        // steps run as a graph replay (for the summary line)
  std::int64_t skipped_steps = 0;  // --amp fp16: steps skipped on inf/NaN in this run
  // The log window (--log-every): its loss sum and its images on this rank.
  double window_loss = 0;
  std::int64_t window_images = 0;
  // The best evaluation of the run (--keep-best), and whether its checkpoint is still to keep.
  double best_top1 = -1;  // -1: none yet
  std::int64_t best_step = -1;
  bool best_due = false;
  // The run's totals before this process (the resumed checkpoint's).
  double wall_before = 0;
  double train_before = 0;
  std::int64_t images_before = 0;
};

}  // namespace mnist_ddp
