// dry_run.cpp — --dry-run's plan (dry_run.hpp).
#include "mnist_ddp/app/dry_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/train/trainer.hpp"

namespace mnist_ddp {
namespace {

std::string absolute(const std::string& path) {
  std::error_code ec;
  const auto p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

std::string communication(const Config& cfg, const CommPlan& plan, int world) {
  std::string out;
  switch (plan.gradients) {
    case GradientComm::Mpi:
      out = "gradients all-reduced by MPI on host memory";
      break;
    case GradientComm::Nccl:
      out = "gradients all-reduced by NCCL on device memory";
      break;
    case GradientComm::HostStagedMpi:
      out = "gradients all-reduced by MPI, staged through host memory (--comm mpi)";
      break;
  }
  if (world == 1) out += " (one rank: nothing crosses ranks)";
  out += !cfg.train.gradients.overlap ? ", once after backward (--no-overlap)"
                                      : fmt::format(", in {} KiB buckets during backward",
                                                    cfg.train.gradients.bucket_cap_kb);
  if (plan.thread_engine) out += ", on a communication thread";
  if (!plan.why_no_thread.empty()) out += "; no communication thread: " + plan.why_no_thread;
  if (plan.local_sgd != LocalSgdComm::None) {
    out += fmt::format(
        "; post-local SGD from step {} (node-local groups, a global average "
        "every {} steps)",
        cfg.train.gradients.local_sgd.start, cfg.train.gradients.local_sgd.period);
  }
  if (plan.graphs) out += "; each step a CUDA graph";
  if (!plan.why_no_graphs.empty()) out += "; CUDA graphs off: " + plan.why_no_graphs;
  return out;
}

}  // namespace

RunShape run_shape(const Identity& id, const Placement& where, const Trainer& trainer,
                   const DataSplit& data, const Logger& log) {
  RunShape r;
  r.world = id.world;
  r.nodes = id.num_nodes;
  r.device = where.device_text;
  r.first_step = trainer.step();
  r.total_steps = trainer.total_steps();
  r.steps_per_epoch = trainer.steps_per_epoch();
  r.train_images = data.train.count;
  r.test_images = data.test.count;
  r.log_path = log.log_path();
  r.metrics_path = log.metrics_path();
  return r;
}

std::vector<std::int64_t> planned_checkpoint_steps(const Config& cfg, const RunShape& run) {
  std::set<std::int64_t> steps;
  for (std::int64_t s = run.first_step + 1; s <= run.total_steps; ++s) {
    const bool every = cfg.train.checkpoint.every > 0 && s % cfg.train.checkpoint.every == 0;
    const bool epoch_end = run.steps_per_epoch > 0 && s % run.steps_per_epoch == 0;
    if (every || epoch_end || s == run.total_steps) steps.insert(s);
  }
  return {steps.begin(), steps.end()};
}

std::vector<std::string> dry_run_plan(const Config& cfg, const RunShape& run,
                                      const CommPlan& plan) {
  std::vector<std::string> lines;
  const std::int64_t steps = std::max<std::int64_t>(run.total_steps - run.first_step, 0);
  const std::int64_t global_batch = static_cast<std::int64_t>(cfg.train.schedule.batch_size) *
                                    cfg.train.schedule.accumulate * run.world;
  const bool capped = run.total_steps < run.steps_per_epoch * cfg.train.schedule.epochs;
  if (cfg.eval_only) {
    lines.push_back(fmt::format(
        "plan: evaluate the --resume checkpoint on the {} test images, {} per rank per batch, on "
        "{} rank(s); nothing trained",
        run.test_images, cfg.train.schedule.eval_batch_size, run.world));
  } else {
    lines.push_back(fmt::format(
        "plan: {} step(s), {} to {} ({} epoch(s) x {} steps/epoch{}){}", steps, run.first_step + 1,
        run.total_steps, cfg.train.schedule.epochs, run.steps_per_epoch,
        capped ? ", capped by --max-steps" : "",
        run.first_step > 0 ? fmt::format(", continuing from step {}", run.first_step) : ""));
    lines.push_back(fmt::format(
        "plan: each step {} image(s) per rank{} = {} globally on {} rank(s) ({} node(s), device "
        "{}); {} batch(es) per rank per epoch, {} training images",
        cfg.train.schedule.batch_size,
        cfg.train.schedule.accumulate > 1
            ? fmt::format(" x {} micro-batches", cfg.train.schedule.accumulate)
            : "",
        global_batch, run.world, run.nodes, run.device,
        run.steps_per_epoch * cfg.train.schedule.accumulate, run.train_images));
    lines.push_back(fmt::format(
        "plan: evaluation on the {} test images {}", run.test_images,
        cfg.train.cadence.eval_every > 0
            ? fmt::format("every {} steps and at each epoch's end", cfg.train.cadence.eval_every)
            : "at each epoch's end"));
    const std::vector<std::int64_t> at = planned_checkpoint_steps(cfg, run);
    std::string which;
    for (std::size_t i = 0; i < at.size() && i < 6; ++i) which += fmt::format(" {}", at[i]);
    if (at.size() > 6) which += fmt::format(" ... {}", at.back());
    lines.push_back(fmt::format(
        "plan: {} checkpoint(s) into {} (steps{}; {}{}), keeping the newest {}{}", at.size(),
        absolute(cfg.train.checkpoint.dir), which.empty() ? " none" : which,
        cfg.train.checkpoint.every > 0 ? fmt::format("every {} steps, ", cfg.train.checkpoint.every)
                                       : "",
        "each epoch's end and the last step", cfg.train.checkpoint.keep,
        cfg.train.checkpoint.keep_best
            ? " and the best by test top-1 as ckpt-best.h5 (written at each new best "
              "evaluation)"
            : ""));
  }
  lines.push_back(fmt::format("plan: communication: {}", communication(cfg, plan, run.world)));
  std::string outputs = fmt::format("plan: outputs: log {}, metrics {}", absolute(run.log_path),
                                    absolute(run.metrics_path));
  if (!cfg.trace.empty()) outputs += fmt::format(", timeline {}", absolute(cfg.trace));
  lines.push_back(outputs);
  return lines;
}

int report_dry_run(const Config& cfg, const RunShape& run, const CommPlan& plan, Logger& log) {
  for (const std::string& line : dry_run_plan(cfg, run, plan)) log.info(line);
  log.info(
      "dry run: every check before the first step passed; nothing trained, nothing written but "
      "this log");
  return kExitOk;
}

}  // namespace mnist_ddp
