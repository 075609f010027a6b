// report.hpp — what the trainer tells the user: one log line and one JSONL record (Logger::metrics)
// per event: the live progress line, a training window, an evaluation, an epoch's end and its
// communication, a checkpoint, a stop, the CUDA-graph summary. Figures arrive already measured
// and agreed across ranks; nothing here communicates.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "mnist_ddp/comm/reducer.hpp"
#include "mnist_ddp/diagnostics/log.hpp"
#include "mnist_ddp/train/step_phases.hpp"
#include "mnist_ddp/train/straggler.hpp"
#include "mnist_ddp/train/train_options.hpp"

namespace mnist_ddp {

// The line a straggler event prints (Reporter::straggler): rank, host, device, slow phase, score,
// the cost to the others; a world of one is compared with its own best window, and names no
// phase (it has no faster rank to lose against).
std::string straggler_line(std::int64_t step, const StragglerEvent& e,
                           const std::vector<RankPlacement>& ranks, double threshold);

struct EvalResult {
  double loss = 0;  // mean over the test set
  double top1 = 0;  // fraction
  double top5 = 0;
  std::int64_t count = 0;  // images evaluated (== test set size: each counted exactly once)
};

// The run's totals over all its processes (a resumed or requeued run continues its checkpoint's):
// what metrics.jsonl's wall_s, train_s and images_seen say.
struct RunTotals {
  double wall_s = 0;             // wall-clock seconds of the processes, from their start
  double train_s = 0;            // of those, in training steps (no evaluation, no checkpoints)
  std::int64_t images_seen = 0;  // training images consumed, all ranks together
};

// Where the run stands when an event is reported.
struct StepPosition {
  std::int64_t step = 0;
  std::int64_t epoch = 0;  // 0-based
  std::int64_t total_steps = 0;
  RunTotals totals;
};

// The totals as metrics.jsonl fields (every training, evaluation and checkpoint record has them).
void add_totals(nlohmann::json& record, const RunTotals& t);

// A --log-every window: the global mean loss and the throughput so far.
struct WindowFigures {
  double loss = 0;
  double lr = 0;
  double images_per_s = 0;  // this process's training images over its training time
  std::uint64_t comm_bytes = 0;
  // --amp fp16: the loss scale, the steps skipped in this window and in the run.
  struct Amp {
    double scale = 0;
    std::int64_t skipped = 0;
    std::int64_t skipped_total = 0;
  };
  std::optional<Amp> amp;
};

// The epoch's gradient communication (Reducer statistics) and what carried it.
struct CommFigures {
  ReducerStats stats;
  std::int64_t micro_batches = 0;  // forward/backward passes behind stats.steps (--accumulate)
  std::size_t buckets = 0;
  const char* transport = "";
  bool gpu = false;
};

class Reporter {
 public:
  // schedule, gradients: what the lines name (epochs, micro-batches, overlap, compression).
  Reporter(const ScheduleOptions& schedule, const GradientOptions& gradients, Logger& log)
      : schedule_(schedule), gradients_(gradients), log_(log) {}
  // The live progress line (a TTY only).
  void progress(const StepPosition& at, double window_loss, double images_per_s, double eta_s);
  void train_window(const StepPosition& at, const WindowFigures& w);
  void eval(const StepPosition& at, const EvalResult& e);
  void comm_epoch(const StepPosition& at, const CommFigures& c);
  // The epoch's median step split into phases (this rank's `steps` steps; CPU).
  // timing: how the steps were timed ("host clocks", or the GPU's CUDA events on a sample).
  void step_phases(const StepPosition& at, std::size_t steps, const PhaseSeconds& median,
                   const std::string& timing);
  // images_per_s: this process's (the run's totals are in `at`).
  void epoch(const StepPosition& at, bool done, const EvalResult& e, double images_per_s,
             std::uint64_t comm_bytes);
  // --keep-best: a new best evaluation (top-1, a fraction), kept as `path`.
  void best(const StepPosition& at, double top1, const std::string& path);
  void checkpoint(const StepPosition& at, const std::string& path, const char* why,
                  std::int64_t sample_offset, bool preemption);
  void stopping(const char* signal, std::int64_t step);
  void capture_fell_back(int batch, const std::string& why);
  // runs: the steps of this run (micro-batches with --accumulate), replayed of them.
  void graphs(int captured, std::int64_t replayed, std::int64_t runs);
  // A rank became a straggler, or recovered (straggler.hpp): one line and a JSONL record.
  void straggler(const StepPosition& at, const StragglerEvent& e,
                 const std::vector<RankPlacement>& ranks, double threshold);
  // The end-of-run table per node: lines and one JSONL record.
  void node_table(const std::vector<NodeRow>& rows, double threshold);

 private:
  ScheduleOptions schedule_;
  GradientOptions gradients_;
  Logger& log_;
};

}  // namespace mnist_ddp
