// trainer.hpp — the run loop: the sampler's epochs, each step run by the step engine
// (step_engine.hpp: gather batch -> forward -> loss -> backward -> gradient all-reduce -> SGD),
// and between steps the run's cadence (cadence.hpp: replica check, progress, log window,
// stragglers, the agreed stop, evaluation, checkpoints); exact distributed evaluation; metrics and
// progress; resume at the exact sample; clean stops at step boundaries.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mnist_ddp/base/amp_mode.hpp"
#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/comm_plan.hpp"
#include "mnist_ddp/comm/local_sgd.hpp"
#include "mnist_ddp/comm/reducer.hpp"
#include "mnist_ddp/data/dataset.hpp"
#include "mnist_ddp/diagnostics/log.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/model/optimizer.hpp"
#include "mnist_ddp/model/tensor.hpp"
#include "mnist_ddp/process/requeue.hpp"
#include "mnist_ddp/train/cadence.hpp"
#include "mnist_ddp/train/report.hpp"
#include "mnist_ddp/train/run_record.hpp"
#include "mnist_ddp/train/step_engine.hpp"
#include "mnist_ddp/train/step_phases.hpp"
#include "mnist_ddp/train/stopwatch.hpp"
#include "mnist_ddp/train/straggler.hpp"
#include "mnist_ddp/train/test_seams.hpp"
#include "mnist_ddp/train/train_options.hpp"

namespace mnist_ddp {

struct TrainResult {
  EvalResult final_eval;
  bool evaluated = false;
  std::int64_t steps = 0;
  int epochs_completed = 0;
  double train_seconds = 0;      // forward/backward/all-reduce/update only (no evaluation)
  double images_per_second = 0;  // global training images / train_seconds
  std::uint64_t comm_bytes = 0;  // payload bytes this rank passed to collectives
  int stop_signal = 0;           // SIGINT/SIGTERM that stopped the run (0: ran to the end)
  StopDecision stop;             // what that stop does (requeue.hpp), decided once
  std::string last_checkpoint;   // path of the newest checkpoint written by this run
  RunTotals totals;              // the run's, over all its processes (report.hpp)
};

class Trainer {
 public:
  // options: the settings it uses (train_options.hpp; the app layer's flags fill them).
  // stored_config: the configuration every checkpoint records (the app layer's config_json of
  // its Config: what resume compares and --write-config --resume writes back). comms: its
  // communicators and their plan. The data splits must already be loaded into ops
  // (Ops::load_dataset). tracer: the timeline (trace.hpp; the model's and the Reducer's spans too),
  // outliving the trainer.
  Trainer(const TrainOptions& options, std::string stored_config, const TrainerComms& comms,
          Ops& ops, ConvNet& model, const DataSplit& data, Logger& log, Tracer* tracer = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  // Steps per epoch and in the whole run (after --max-steps).
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  std::int64_t total_steps() const { return total_steps_; }
  // Continues from a checkpoint (already identical on every rank): model, optimizer, position.
  // With another world size the position is re-derived from the global samples consumed.
  void resume_from(const TrainingState& s);
  TrainResult run();
  EvalResult evaluate();
  // The state a checkpoint holds now (rank 0's view; identical on every rank but BN buffers).
  TrainingState state() const;
  // The step counter (the checkpoint's step after resume_from) and the lineage the checkpoints
  // carry: new for a fresh run, the checkpoint's when resumed (rank 0's is the one written).
  std::int64_t step() const { return rec_.step; }
  const std::string& run_id() const { return run_id_; }
  // Straggler detection over these ranks (every rank's placement, in rank order): every
  // --straggler-every steps a window is scored, and the run ends with the per-node table. Off
  // with --straggler-every 0. Call before run(), on every rank.
  void watch_stragglers(std::vector<RankPlacement> ranks);

 private:
  // What run() does after each step, in this order (cadence.hpp): the replica check, the live
  // progress line, the log window, the straggler window, the agreed stop signal (which ends the
  // list with the stop), --eval-every's evaluation, and the checkpoint (--checkpoint-every, or a
  // new best under --keep-best).
  RunCadence make_cadence(std::int64_t first_step);
  // The end of an epoch (or of a run stopped inside one): its communication and evaluation.
  EvalResult end_epoch(bool epoch_done);
  // The training clock stopped; sync (GPU): the losses summed so far are read first, so the
  // asynchronous device work is inside the time it is measured by.
  void stop_clock();
  StepPosition position() const;
  // The run's totals now: the resumed checkpoint's plus this process's.
  RunTotals totals() const;
  // --keep-best: an evaluation better than every earlier one of the run (the same decision on
  // every rank: the results were all-reduced) is due to be kept: the checkpoint of its step
  // (written next, or again) becomes the best one (store.hpp keep_as_best).
  void consider_best(const EvalResult& e);
  void log_window();
  // What to do after a divergence: the last good checkpoint (rank 0 knows it), or start again.
  std::string good_checkpoint_advice() const;
  // Collective: rank 0 writes, every rank learns whether it worked. preemption: the rolling
  // preemption checkpoint of this job (the previous one is deleted once this one is on disk).
  void checkpoint(const char* why, bool preemption = false);
  // Collective: every rank's gradient-hook state (PowerSGD), indexed by rank; empty if none.
  std::vector<std::vector<std::pair<std::string, std::vector<float>>>> gather_hook_state();
  TrainOptions opt_;  // a copy: the learning rate's total_steps is set here
  Comm& comm_;
  Comm& model_comm_;
  FlightRecorder* flight_;
  Tracer* tracer_;
  Ops& ops_;
  ConvNet& model_;
  const DataSplit& data_;
  Logger& log_;
  Reporter report_;
  // watch_stragglers(); null: off. Before engine_, which points at it: destroyed after it.
  std::unique_ptr<StragglerMonitor> stragglers_;
  StepEngine engine_;  // assembles and runs each step (buffers, graphs, scaler, reducer)
  CheckpointLayout layout_;
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t total_steps_ = 0;
  RunRecord rec_;  // where the run is, what it has done, its window and its best
  std::int64_t last_checkpoint_step_ = -1;
  std::string last_checkpoint_;
  std::string run_id_;             // the lineage (new_run_id(), or the resumed checkpoint's)
  bool foreign_reported_ = false;  // checkpoints of other runs in the directory: said once
  StopDecision stop_;              // the agreed stop, when there was one
  std::string stored_config_;      // what every checkpoint records as the run's configuration
  Stopwatch clock_;                // training time of this run (no evaluation, no checkpoints)
  std::chrono::steady_clock::time_point last_progress_{};  // the last progress line
};

}  // namespace mnist_ddp
