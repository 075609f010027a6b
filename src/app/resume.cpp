// resume.cpp — the start state of a run: loaded on rank 0 with its warnings, broadcast, applied.
#include "mnist_ddp/app/resume.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "mnist_ddp/checkpoint/broadcast.hpp"
#include "mnist_ddp/checkpoint/store.hpp"
#include "mnist_ddp/comm/agree.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/train/trainer.hpp"

namespace mnist_ddp {
namespace {

// Every rank: a model is fed exactly as it was trained, so a recorded transform replaces the
// mean/std computed from this run's training set (they are equal on the same data).
void use_recorded_input(const InputRecord& in, DataSplit& data, Logger& log) {
  if (!in.recorded) return;
  const auto mean = static_cast<float>(in.mean), std = static_cast<float>(in.std);
  if (mean != data.mean || std != data.std) {
    log.info(fmt::format(
        "input: normalising as the model was trained, mean {:.4f} std {:.4f} (recorded in the "
        "checkpoint; this data's own: mean {:.4f} std {:.4f})",
        mean, std, data.mean, data.std));
  }
  data.mean = mean;
  data.std = std;
}

}  // namespace

void warn_about_input(const InputRecord& in, const std::string& path, const DataSplit& data,
                      const std::function<void(const std::string&)>& warn) {
  if (!in.recorded) {
    warn(fmt::format(
        "{} is a format-version-1 checkpoint: it does not record its input transform; this run "
        "normalises with its data's own mean {:.4f} / std {:.4f}, and its checkpoints record them",
        path, data.mean, data.std));
  } else if (in.labels_crc32 != data.crc32 && in.train_count > 0) {
    warn(fmt::format(
        "{} was trained on '{}' (labels crc32 {:08x}, {} training images); this run reads '{}' "
        "(labels crc32 {:08x}, {} training images) from {}: continuing on this run's data",
        path, in.name, in.labels_crc32, in.train_count, data.name, data.crc32, data.train.count,
        data.dir));
  }
}

void check_checkpoint_names(Comm& control, const Config& cfg, const Trainer& trainer) {
  run_agreed(control, [&] {
    if (control.rank() != 0) return;
    const auto in_the_way = checkpoints_in_the_way(cfg.train.checkpoint.dir, trainer.run_id(),
                                                   trainer.step(), cfg.train.checkpoint.keep_best);
    if (in_the_way.empty()) return;
    std::string listed;
    for (std::size_t i = 0; i < in_the_way.size() && i < 4; ++i)
      listed += (i ? ", " : "") + in_the_way[i];
    if (in_the_way.size() > 4) listed += fmt::format(", and {} more", in_the_way.size() - 4);
    throw UserError(fmt::format(
        "--checkpoint-dir {} holds {} checkpoint(s) of another run that this run (run id {}, "
        "from step {}) would overwrite: {}. To continue that run pass --resume auto; to keep "
        "both, pass another --checkpoint-dir (or move those files away)",
        cfg.train.checkpoint.dir, in_the_way.size(), trainer.run_id(), trainer.step(), listed));
  });
}

void warn_about_changed_settings(const std::string& stored_json, const Config& cfg,
                                 const std::function<void(const std::string&)>& warn) {
  const nlohmann::json stored = nlohmann::json::parse(stored_json, nullptr, false);
  if (stored.is_discarded() || !stored.is_object()) return;  // written by an older version
  const nlohmann::json now = nlohmann::json::parse(config_json(cfg));
  std::string changed;
  int n = 0;
  for (const std::string& key : settings_compared_on_resume()) {
    if (!stored.contains(key) || stored[key] == now[key]) continue;
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    changed +=
        fmt::format("{}--{} {} -> {}", n++ ? ", " : "", flag, stored[key].dump(), now[key].dump());
  }
  if (n > 0) {
    warn(fmt::format(
        "resume: {} setting(s) differ from the checkpoint's run and apply from this step on: {}", n,
        changed));
  }
}

namespace {

// How each start names its checkpoint, in the user's words (the resolver's `flag`).
const char* start_flag(const Config& cfg) {
  return cfg.eval_only ? "--eval-only --resume" : "--init-weights";
}

// Rank 0: the model --eval-only evaluates or --init-weights starts from, with its warnings.
ModelWeights read_start_model(const Config& cfg, const CheckpointLayout& layout,
                              const DataSplit& data, Logger& log) {
  const auto warn = [&](const std::string& w) { log.warn(w); };
  const ResolvedCheckpoint r =
      resolve_checkpoint(cfg.eval_only ? cfg.resume : cfg.init_weights, cfg.train.checkpoint.dir,
                         layout, start_flag(cfg), false);
  for (const auto& w : r.warnings) warn(w);
  if (r.path.empty()) {
    throw UserError(fmt::format(
        "{} auto: no checkpoint in {} to {}; pass --checkpoint-dir DIR or {} PATH", start_flag(cfg),
        cfg.train.checkpoint.dir, cfg.eval_only ? "evaluate" : "start from",
        cfg.eval_only ? "--resume" : "--init-weights"));
  }
  ModelWeights weights = load_model_weights(r.path, layout);
  log.info(fmt::format("{}: {} (the model of step {}{})",
                       cfg.eval_only ? "eval-only" : "init-weights", r.path, weights.step,
                       weights.weights_only ? ", weights only" : ""));
  warn_about_input(weights.input, r.path, data, warn);
  return weights;
}

// Rank 0: the training state --resume names (nullopt: --resume none, or auto found none), with
// its warnings: damaged files skipped, the run's best, another dataset, changed settings, later
// checkpoints of the lineage this run replaces.
std::optional<TrainingState> read_training_state(const Config& cfg, const CheckpointLayout& layout,
                                                 const DataSplit& data, Logger& log) {
  if (cfg.resume == "none") return std::nullopt;
  const auto warn = [&](const std::string& w) { log.warn(w); };
  ResolvedCheckpoint r =
      resolve_checkpoint(cfg.resume, cfg.train.checkpoint.dir, layout, "--resume", true);
  for (const auto& w : r.warnings) warn(w);
  if (!r.state) {
    log.info(fmt::format("resume: no checkpoint in {}, starting fresh", cfg.train.checkpoint.dir));
    return std::nullopt;
  }
  TrainingState& s = *r.state;
  log.info(r.chosen == CheckpointChoice::Best
               ? fmt::format("resume: {} (the best checkpoint: test top-1 {:.2f}% at step {})",
                             r.path, 100 * s.best_top1, s.best_step)
               : "resume: " + r.path);
  const BestReconciled best = reconcile_best(cfg.train.checkpoint.dir, r.path, layout, s,
                                             cfg.train.checkpoint.keep_best && !cfg.dry_run);
  for (const auto& w : best.warnings) warn(w);
  if (!best.linked.empty()) log.info(best.linked);
  warn_about_input(s.input, r.path, data, warn);
  warn_about_changed_settings(s.config_json, cfg, warn);
  const auto later = later_in_lineage(cfg.train.checkpoint.dir, s.run_id, s.step);
  if (!later.empty()) {
    warn(fmt::format(
        "resume: {} is at step {}, and {} checkpoint(s) of this run at later steps are in {} "
        "(newest {}): they hold the steps this run now replaces, stay until it writes those "
        "steps again, and --resume auto picks them first; move them away if that is not "
        "what you want",
        r.path, s.step, later.size(), cfg.train.checkpoint.dir, later.front()));
  }
  return std::move(r.state);
}

}  // namespace

StartState restore_start_state(Comm& control, const Config& cfg, DataSplit& data, ConvNet& model,
                               Trainer& trainer, Logger& log) {
  const CheckpointLayout layout = checkpoint_layout(model);
  // --eval-only and --init-weights need a model (from a full or a weights-only checkpoint);
  // --resume needs the whole training state. The same on every rank (flags).
  const bool model_only = cfg.eval_only || !cfg.init_weights.empty();
  std::optional<TrainingState> resume;
  std::optional<ModelWeights> weights;
  // Collective (agreement): rank 0 resolves the file, loads it and warns; a file that does not
  // load is one error on every rank.
  run_agreed(control, [&] {
    if (control.rank() != 0) return;
    if (model_only) {
      weights = read_start_model(cfg, layout, data, log);
    } else {
      resume = read_training_state(cfg, layout, data, log);
    }
  });
  StartState start;
  // Collective: rank 0's bytes to every rank, applied there: the model (and the input transform
  // it was trained with), or the whole training state.
  if (model_only && broadcast_model_weights(control, weights, layout)) {
    use_recorded_input(weights->input, data, log);
    model.load_state(weights->params, weights->buffers, weights->num_batches_tracked);
    if (!cfg.eval_only) {
      log.info("init-weights: training starts at step 0 with a fresh optimizer from that model");
    }
    start.model_step = weights->step;
  }
  if (!model_only && broadcast_training_state(control, resume, layout)) {
    use_recorded_input(resume->input, data, log);
    if (resume->world_size != control.size()) {
      log.info(
          fmt::format("resume: checkpoint written by {} ranks, now {}: model and optimizer "
                      "restored, position re-derived from the {} samples of epoch {} "
                      "already consumed",
                      resume->world_size, control.size(),
                      resume->sample_offset * resume->world_size, resume->epoch + 1));
    }
    trainer.resume_from(*resume);
    log.info(fmt::format("resume: step {}, epoch {}, sample {} of the epoch", resume->step,
                         resume->epoch + 1, resume->sample_offset));
    start.model_step = resume->step;
  }
  start.first_step = trainer.step();  // what the trainer runs next: resumed, or 0
  return start;
}

}  // namespace mnist_ddp
