// trainer.hpp — the training loop: sampler -> gather batch -> forward -> loss -> backward ->
// gradient all-reduce -> SGD step; exact distributed evaluation; metrics and progress; checkpoint
// cadence; resume at the exact sample; clean stops at step boundaries.
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
#include "mnist_ddp/ops/grad_scaler.hpp"
#include "mnist_ddp/ops/step_graph.hpp"
#include "mnist_ddp/process/requeue.hpp"
#include "mnist_ddp/train/report.hpp"
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

// The communicators a trainer works with, and the plan (comm/comm_plan.hpp; made by
// app/plan_communication.hpp) that chose them.
struct TrainerComms {
  Comm& control;           // host memory: agreement, metrics, evaluation sums
  Comm& model;             // the model's memory: MPI on the CPU; NCCL or host-staged MPI on a GPU
  CommPlan plan;           // which of them carries the gradients, and whether steps are graphs
  Comm* local = nullptr;   // post-local SGD's node-local group (plan.local_sgd)
  Comm* thread = nullptr;  // the communication thread's (plan.thread_engine; threaded_comm.hpp)
  FlightRecorder* flight = nullptr;  // told each step's number: its records name the step
};

// One micro-batch of an optimizer step (--accumulate): its index among the step's count. The
// first broadcasts the BN buffers (as DDP's forward after a synchronised step does), every one
// but the last adds its gradients to the local sum (inside no_sync), the last one's join the sum
// layer by layer as backward produces them and go out in the buckets' all-reduces.
struct MicroBatch {
  int index = 0;
  int count = 1;
  bool first() const { return index == 0; }
  bool last() const { return index == count - 1; }
};
// The sizes of the micro-batches of the step that starts at `offset` of an epoch of
// `epoch_size` samples: up to `accumulate` of `batch` each, while samples remain (the epoch's last
// step may have fewer, and its last micro-batch fewer samples). Pure: unit-tested.
std::vector<int> micro_batch_sizes(std::int64_t offset, std::int64_t epoch_size, int batch,
                                   int accumulate);
// The CUDA graph a micro-batch runs as (StepGraphs' key): batch size, micro-batch count (the loss
// scale) and kind (the only micro-batch / the first / a middle one / the last). Distinct for
// distinct graphs; --accumulate 1 gives one key per batch size, as before.
std::int64_t step_graph_key(int n, const MicroBatch& mb);

// GPU steps timed for the per-epoch breakdown: every this many (StepPhases, trace.hpp).
inline constexpr std::int64_t kGpuPhaseSampleEvery = 50;

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
  std::int64_t step() const { return step_; }
  const std::string& run_id() const { return run_id_; }
  // Straggler detection over these ranks (every rank's placement, in rank order): every
  // --straggler-every steps a window is scored, and the run ends with the per-node table. Off
  // with --straggler-every 0. Call before run(), on every rank.
  void watch_stragglers(std::vector<RankPlacement> ranks);

 private:
  // One optimizer step over micro-batches of these sizes at offset_ (one without --accumulate):
  // each eager, or captured / replayed as a CUDA graph, then end_micro; then end_step. The only
  // place a step runs.
  void train_step(const std::vector<int>& sizes);
  // A micro-batch, the one place a step is assembled: gather the batch, BN-buffer broadcast
  // (first), forward, loss (summed on the backend; the gradient scaled by 1/(n x count)),
  // backward; not the last: its gradients join the local sum; the last: with the gradient
  // all-reduce, then SGD. Enqueues only and counts nothing (capturable on a GPU).
  void enqueue_step(int n, const MicroBatch& mb);
  // The host-side accounting of the micro-batch / the step just run, however it ran (a graph
  // replay runs no host code): BN num_batches_tracked, the position and the window per
  // micro-batch; the step counter and what counts steps (the optimizer's, the Reducer's bytes).
  void end_micro(int n);
  void end_step();
  // The end of a phase of the step being assembled (step_phases.hpp; CPU steps only).
  void mark(Phase p);
  // After each step in run(): replica check, progress, log window, the agreed stop signal,
  // --checkpoint-every, --eval-every. Returns the stop signal (0: go on).
  int after_step(std::int64_t first_step);
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
  // StepGraphs' hooks: the host-side step state saved before a capture and put back when the
  // capture failed on some rank (the step then runs eagerly), and the agreement on that.
  CaptureHooks capture_hooks();
  // Collective: rank 0 writes, every rank learns whether it worked. preemption: the rolling
  // preemption checkpoint of this job (the previous one is deleted once this one is on disk).
  void checkpoint(const char* why, bool preemption = false);
  // Collective: every rank's gradient-hook state (PowerSGD), indexed by rank; empty if none.
  std::vector<std::vector<std::pair<std::string, std::vector<float>>>> gather_hook_state();
  TrainOptions opt_;  // a copy: the learning rate's total_steps is set here
  Comm& comm_;
  Comm& model_comm_;
  Comm* local_comm_;
  FlightRecorder* flight_;
  Tracer* tracer_;
  Ops& ops_;
  ConvNet& model_;
  const DataSplit& data_;
  Logger& log_;
  Reporter report_;
  Sgd sgd_;
  std::unique_ptr<Reducer> reducer_;    // the gradient all-reduces (host or device memory)
  Comm* bucket_comm_ = nullptr;         // where the Reducer reduces until post-local SGD
  std::unique_ptr<StepGraphs> graphs_;  // GPU with a capturable model communicator
  struct StepSnapshot {                 // capture_hooks(): host state before a capture
    Reducer::Mark reducer;
    Comm::Mark model_comm;
    std::size_t trace = 0;
  };
  StepSnapshot before_capture_;
  std::unique_ptr<GradScaler> scaler_;  // --amp fp16: the dynamic loss scale (on the GPU)
  std::int64_t skipped_steps_ = 0;      // --amp fp16: steps skipped on inf/NaN in this run
  std::int64_t replays_ = 0;            // steps run as a graph replay (for the summary line)
  BnSync bn_sync_;                      // --sync-bn exchanges (set on ops_ while alive)
  CheckpointLayout layout_;
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t total_steps_ = 0;
  std::int64_t step_ = 0;  // the step counter: optimizer steps taken (resumed ones included)
  std::int64_t epoch_ = 0;
  std::int64_t offset_ = 0;  // samples of epoch_ this rank has consumed
  std::int64_t last_checkpoint_step_ = -1;
  std::string last_checkpoint_;
  std::string run_id_;             // the lineage (new_run_id(), or the resumed checkpoint's)
  bool foreign_reported_ = false;  // checkpoints of other runs in the directory: said once
  StopDecision stop_;              // the agreed stop, when there was one
  std::string stored_config_;      // what every checkpoint records as the run's configuration
  // The run's totals before this process (the resumed checkpoint's) and its best evaluation.
  double wall_before_ = 0;
  double train_before_ = 0;
  std::int64_t images_before_ = 0;
  double best_top1_ = -1;  // -1: none yet
  std::int64_t best_step_ = -1;
  bool best_due_ = false;  // best_step_'s checkpoint is not yet kept as the best
  std::unique_ptr<StragglerMonitor> stragglers_;  // watch_stragglers(); null: off
  Stopwatch clock_;           // training time of this run (no evaluation, no checkpoints)
  StepPhases phases_;         // where each step's time goes (the epoch's medians)
  bool time_phases_ = false;  // host clocks time the step: the CPU backend
  std::int64_t images_ = 0;   // global training images of this run
  std::chrono::steady_clock::time_point last_progress_{};  // the last progress line
  double window_loss_ = 0;
  std::int64_t window_images_ = 0;
  double last_lr_ = 0;
  Tensor x_;         // [max_batch][784] in backend memory
  Tensor dlogits_;   // [max_batch][10]
  Tensor grad_sum_;  // [params] --accumulate: the step's earlier micro-batches' gradients
  std::int64_t micro_batches_ = 0;  // run since the last comm report (--accumulate)
  std::int64_t micro_runs_ = 0;     // micro-batches run in this run (a step each without it)
  std::int32_t* y_ = nullptr;       // [max_batch] labels in backend memory
};

}  // namespace mnist_ddp
