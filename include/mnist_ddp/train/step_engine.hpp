// step_engine.hpp — one optimizer step, assembled and run in one place: gather the batch,
// broadcast the BN buffers, forward, loss, backward with the gradient all-reduces (the Reducer's
// buckets, launched as backward produces them), the optimizer; over --accumulate's micro-batches;
// eagerly or as a CUDA graph (StepGraphs), under --amp fp16's loss scaler, with --sync-bn's
// exchanges. It owns what a step needs (the batch buffers, the Reducer, the graphs, the scaler,
// SGD) and counts every step into the run's record; the trainer's run loop (trainer.hpp) decides
// when steps run and what happens between them (train/cadence.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/comm_plan.hpp"
#include "mnist_ddp/comm/flight_recorder.hpp"
#include "mnist_ddp/comm/reducer.hpp"
#include "mnist_ddp/data/dataset.hpp"
#include "mnist_ddp/diagnostics/log.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/model/optimizer.hpp"
#include "mnist_ddp/model/tensor.hpp"
#include "mnist_ddp/ops/grad_scaler.hpp"
#include "mnist_ddp/ops/step_graph.hpp"
#include "mnist_ddp/train/report.hpp"
#include "mnist_ddp/train/run_record.hpp"
#include "mnist_ddp/train/step_phases.hpp"
#include "mnist_ddp/train/straggler.hpp"
#include "mnist_ddp/train/train_options.hpp"

namespace mnist_ddp {

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

class StepEngine {
 public:
  // options: the trainer's, resolved (its copy outlives the engine). comms: the communicators and
  // their plan, checked against each other here. The data splits must already be loaded into ops.
  // report: where a capture that fell back is said. tracer: the timeline (or nullptr).
  StepEngine(const TrainOptions& options, const TrainerComms& comms, Ops& ops, ConvNet& model,
             const DataSplit& data, Reporter& report, Logger& log, Tracer* tracer);
  ~StepEngine();
  StepEngine(const StepEngine&) = delete;
  StepEngine& operator=(const StepEngine&) = delete;

  // One optimizer step over micro-batches of these sizes at rec.offset (one without --accumulate)
  // at learning rate lr: each eager, or captured / replayed as a CUDA graph; counted into rec (the
  // position, the window, the images, the step counter) however it ran. The only place a step
  // runs.
  void run_step(const std::vector<int>& sizes, double lr, RunRecord& rec);

  // The batch buffers in backend memory (evaluation fills them too): x [max_batch][784] and the
  // labels y [max_batch].
  float* x() { return x_.data(); }
  std::int32_t* y() { return y_; }
  Reducer& reducer() const { return *reducer_; }  // a checkpoint reads its hook's state
  Sgd& sgd() { return sgd_; }
  const Sgd& sgd() const { return sgd_; }
  GradScaler* scaler() const { return scaler_.get(); }        // --amp fp16 only
  const StepGraphs* graphs() const { return graphs_.get(); }  // planned graphs only
  // Where each step's time goes (host clocks on the CPU, sampled CUDA events on a GPU).
  StepPhases& phases() { return phases_; }
  bool host_timed() const { return time_phases_; }
  // The straggler monitor that each step's compute time is added to (nullptr: none).
  void set_stragglers(StragglerMonitor* monitor) { stragglers_ = monitor; }

 private:
  // A micro-batch: gather the batch, BN-buffer broadcast (first), forward, loss (summed on the
  // backend; the gradient scaled by 1/(n x count)), backward; not the last: its gradients join the
  // local sum; the last: with the gradient all-reduce, then SGD. Enqueues only and counts nothing
  // (capturable on a GPU).
  void enqueue(int n, const MicroBatch& mb, std::int64_t step);
  // The end of a phase of the step being assembled (step_phases.hpp; CPU steps only).
  void mark(Phase p);
  // StepGraphs' hooks: the host-side step state saved before a capture and put back when the
  // capture failed on some rank (the step then runs eagerly), and the agreement on that.
  CaptureHooks capture_hooks();

  const TrainOptions& opt_;
  Comm& comm_;
  Comm& model_comm_;
  Comm* local_comm_;
  Tracer* tracer_;
  Ops& ops_;
  ConvNet& model_;
  const DataSplit& data_;
  Reporter& report_;
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
  BnSync bn_sync_;                      // --sync-bn exchanges (set on ops_ while alive)
  StragglerMonitor* stragglers_ = nullptr;
  StepPhases phases_;          // where each step's time goes (the epoch's medians)
  bool time_phases_ = false;   // host clocks time the step: the CPU backend
  Tensor x_;                   // [max_batch][784] in backend memory
  Tensor dlogits_;             // [max_batch][10]
  Tensor grad_sum_;            // [params] --accumulate: the step's earlier micro-batches' gradients
  std::int32_t* y_ = nullptr;  // [max_batch] labels in backend memory
};

}  // namespace mnist_ddp
