// train_and_report.cpp — evaluation-only runs, and training with its report
// (train_and_report.hpp).
#include "mnist_ddp/app/train_and_report.hpp"

#include <fmt/format.h>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "mnist_ddp/checkpoint/dir_lock.hpp"
#include "mnist_ddp/comm/agree.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/process/requeue.hpp"
#include "mnist_ddp/process/signals.hpp"
#include "mnist_ddp/train/trainer.hpp"

namespace mnist_ddp {
namespace {

// The trace file's collectives, over the control communicator (host memory).
TraceCollectives trace_collectives(Comm& control) {
  TraceCollectives c;
  c.rank = control.rank();
  c.gather_doubles = [&control](double mine) {
    std::vector<double> all(static_cast<std::size_t>(control.size()));
    control.allgather(std::span<const double>(&mine, 1), all);  // collective
    return all;
  };
  c.gather_strings = [&control](const std::string& mine) {
    return gather_strings(control, mine);  // collective
  };
  c.agreed = [&control](const std::function<void()>& fn) { run_agreed(control, fn); };
  return c;
}

}  // namespace

int evaluate_only(Comm& control, Trainer& trainer, const DataSplit& data, std::int64_t step,
                  Logger& log) {
  // Collectives (inside): the model every replica holds, evaluated on disjoint test shards.
  const EvalResult e = trainer.evaluate();
  log.info(fmt::format(
      "eval-only: step {} checkpoint on {} ({} test images, {} rank(s)): test top-1 {:.2f}% "
      "top-5 {:.2f}% loss {:.4f}",
      step, data.name, e.count, control.size(), 100 * e.top1, 100 * e.top5, e.loss));
  log.metrics({{"event", "eval_only"},
               {"step", step},
               {"top1", e.top1},
               {"top5", e.top5},
               {"test_loss", e.loss},
               {"count", e.count},
               {"dataset", data.name}});
  return kExitOk;
}

int train_and_report(Comm& control, const Config& cfg, Trainer& trainer, const DataSplit& data,
                     Logger& log, const TraceFile* trace) {
  // What tools/compare_runs reads to tell runs apart: the configuration and lineage of each start
  // (a resumed run adds one with the same run id), then how it ended (done or stopped).
  const LockHolder me = this_process_as_holder();
  std::error_code ec;
  log.metrics({{"event", "start"},
               {"run_id", trainer.run_id()},
               {"step", trainer.step()},
               {"total_steps", trainer.total_steps()},
               {"ranks", control.size()},
               {"host", me.host},
               {"job", me.job},
               {"time", me.started},
               {"checkpoint_dir", std::filesystem::absolute(cfg.train.checkpoint.dir, ec).string()},
               {"config", nlohmann::json::parse(config_json(cfg))}});
  log.info(fmt::format(
      "training: {} epoch(s) x {} steps/epoch = {} steps{}, batch {} per rank{} "
      "({} global), lr {}",
      cfg.train.schedule.epochs, trainer.steps_per_epoch(), trainer.total_steps(),
      trainer.total_steps() < trainer.steps_per_epoch() * cfg.train.schedule.epochs
          ? " (capped by --max-steps)"
          : "",
      cfg.train.schedule.batch_size,
      cfg.train.schedule.accumulate > 1
          ? fmt::format(" x {} micro-batches per step (--accumulate: one all-reduce per step)",
                        cfg.train.schedule.accumulate)
          : "",
      static_cast<std::int64_t>(cfg.train.schedule.batch_size) * cfg.train.schedule.accumulate *
          control.size(),
      cfg.train.optimizer.lr.base_lr));
  TrainResult r = trainer.run();
  if (trace != nullptr) {
    // Collective: written before a requeue (Slurm may end these processes right after it).
    write_trace(*trace, trace_collectives(control));
    log.info(fmt::format("trace: {} (steps {}:{}; open it in ui.perfetto.dev or chrome://tracing)",
                         trace->path, trace->tracer.window().first, trace->tracer.window().last));
  }
  if (r.stop_signal != 0) {
    log.info(fmt::format("stopped by {} at step {}; checkpoint {}; continue with --resume auto",
                         signal_name(r.stop_signal), r.steps, r.last_checkpoint));
    nlohmann::json stopped = {{"event", "stopped"},
                              {"signal", signal_name(r.stop_signal)},
                              {"steps", r.steps},
                              {"checkpoint", r.last_checkpoint}};
    add_totals(stopped, r.totals);
    log.metrics(stopped);
    std::int64_t requeued = 0;
    if (r.stop.requeue) {
      if (control.rank() == 0) {
        // Said first: once Slurm requeues the job it ends these processes (SIGTERM, which as a
        // second stop signal exits at once), possibly before scontrol has even returned.
        log.info(fmt::format("requeue: asking Slurm to requeue job {} (it resumes from {})",
                             std::getenv("SLURM_JOB_ID") ? std::getenv("SLURM_JOB_ID") : "?",
                             r.last_checkpoint));
        std::string what;
        requeued = request_slurm_requeue(&what) ? 1 : 0;
        log.info("requeue: " + what);
      }
      // Collective: every rank exits with the same status (0 once Slurm has requeued the job).
      control.broadcast(std::span<std::int64_t>(&requeued, 1), 0);
    }
    // Every rank leaves with this status, agreed: from here a launcher's SIGTERM (Slurm ending a
    // requeued job, mpirun ending the slower ranks of a stopped one) leaves with it at once.
    const int code = requeued != 0 ? kExitOk : 128 + r.stop_signal;
    decide_exit(code);
    return code;
  }
  if (!r.evaluated) r.final_eval = trainer.evaluate();  // resumed a run that had already ended
  // The run's totals (over every process of it), and this process's throughput.
  nlohmann::json done = {{"event", "done"},
                         {"steps", r.steps},
                         {"top1", r.final_eval.top1},
                         {"top5", r.final_eval.top5},
                         {"test_loss", r.final_eval.loss},
                         {"images_per_s", r.images_per_second},
                         {"comm_bytes", r.comm_bytes},
                         {"dataset", data.name}};
  add_totals(done, r.totals);
  log.metrics(done);
  log.info(
      fmt::format("done: {} steps, test top-1 {:.2f}% top-5 {:.2f}% loss {:.4f}, training "
                  "{:.1f} s at {:.0f} img/s ({} ranks); log {}",
                  r.steps, 100 * r.final_eval.top1, 100 * r.final_eval.top5, r.final_eval.loss,
                  r.train_seconds, r.images_per_second, control.size(), log.log_path()));
  return kExitOk;
}

}  // namespace mnist_ddp
