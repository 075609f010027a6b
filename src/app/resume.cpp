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
#include "mnist_ddp/ops/ops.hpp"
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

void reconcile_best(const Config& cfg, const std::string& from, const CheckpointLayout& layout,
                    TrainingState& s, Logger& log) {
  const std::string best = best_checkpoint_path(cfg.checkpoint_dir);
  std::error_code ec;
  const bool exists = std::filesystem::exists(best, ec);
  std::optional<TrainingState> kept;
  if (exists) {
    try {
      kept = load_checkpoint(best, layout);
    } catch (const UserError& e) {
      log.warn(fmt::format("--keep-best: {} (it is replaced by the next best)", e.what()));
    }
  }
  const bool ours = kept && !s.run_id.empty() && kept->run_id == s.run_id;
  if (ours && kept->best_top1 > s.best_top1) {
    s.best_top1 = kept->best_top1;
    s.best_step = kept->best_step;
  }
  const bool unlinked = s.best_step == s.step && s.best_top1 >= 0 && from != best &&
                        (!exists || (ours && kept->step != s.step));
  if (cfg.keep_best && !cfg.dry_run && unlinked) {
    log.info(fmt::format("best: {} records the best test top-1 ({:.2f}% at step {}), kept as {}",
                         from, 100 * s.best_top1, s.best_step,
                         keep_as_best(cfg.checkpoint_dir, from)));
  }
}

std::string best_checkpoint_or_fail(const Config& cfg, const std::string& flag) {
  const std::string best = best_checkpoint_path(cfg.checkpoint_dir);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(best, ec)) {
    throw UserError(fmt::format(
        "{}: --checkpoint-dir {} has no best checkpoint ({}; a run trained with --keep-best "
        "keeps one); pass --resume auto or --resume PATH, or the --checkpoint-dir of that run",
        flag, cfg.checkpoint_dir, std::filesystem::path(best).filename().string()));
  }
  return best;
}

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
    const auto in_the_way =
        checkpoints_in_the_way(cfg.checkpoint_dir, trainer.run_id(), trainer.step(), cfg.keep_best);
    if (in_the_way.empty()) return;
    std::string listed;
    for (std::size_t i = 0; i < in_the_way.size() && i < 4; ++i)
      listed += (i ? ", " : "") + in_the_way[i];
    if (in_the_way.size() > 4) listed += fmt::format(", and {} more", in_the_way.size() - 4);
    throw UserError(fmt::format(
        "--checkpoint-dir {} holds {} checkpoint(s) of another run that this run (run id {}, "
        "from step {}) would overwrite: {}. To continue that run pass --resume auto; to keep "
        "both, pass another --checkpoint-dir (or move those files away)",
        cfg.checkpoint_dir, in_the_way.size(), trainer.run_id(), trainer.step(), listed));
  });
}

void warn_about_changed_settings(const std::string& stored_json, const Config& cfg,
                                 const std::function<void(const std::string&)>& warn) {
  const nlohmann::json stored = nlohmann::json::parse(stored_json, nullptr, false);
  if (stored.is_discarded() || !stored.is_object()) return;  // written by an older version
  const nlohmann::json now = nlohmann::json::parse(config_json(cfg));
  std::string changed;
  int n = 0;
  for (const char* key :
       {"batch_size", "accumulate", "seed", "lr", "lr_schedule", "lr_step_size", "lr_gamma",
        "warmup_steps", "min_lr", "momentum", "dampening", "weight_decay", "nesterov", "amp"}) {
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

StartState restore_start_state(Comm& control, const Config& cfg, DataSplit& data, Ops& ops,
                               ConvNet& model, Trainer& trainer, Logger& log) {
  const CheckpointLayout layout = checkpoint_layout(model);
  const auto warn = [&](const std::string& w) { log.warn(w); };
  // --eval-only and --init-weights need a model (from a full or a weights-only checkpoint);
  // --resume needs the whole training state. The same on every rank (flags).
  const bool model_only = cfg.eval_only || !cfg.init_weights.empty();
  std::optional<TrainingState> resume;
  std::optional<ModelWeights> weights;
  run_agreed(control, [&] {
    if (control.rank() != 0) return;
    if (model_only) {
      std::string path = cfg.eval_only ? cfg.resume : cfg.init_weights;
      if (path == "auto") {
        std::vector<std::string> warnings;
        auto found = find_resume_checkpoint(cfg.checkpoint_dir, layout, &warnings);
        for (const auto& w : warnings) warn(w);
        if (!found) {
          throw UserError(
              cfg.eval_only
                  ? fmt::format("--eval-only --resume auto: no checkpoint in {} to evaluate; pass "
                                "--checkpoint-dir DIR or --resume PATH",
                                cfg.checkpoint_dir)
                  : fmt::format("--init-weights auto: no checkpoint in {} to start from; pass "
                                "--checkpoint-dir DIR or --init-weights PATH",
                                cfg.checkpoint_dir));
        }
        path = found->first;
      } else if (path == "best") {
        path = best_checkpoint_or_fail(
            cfg, cfg.eval_only ? "--eval-only --resume best" : "--init-weights best");
      }
      weights = load_model_weights(path, layout);
      log.info(fmt::format("{}: {} (the model of step {}{})",
                           cfg.eval_only ? "eval-only" : "init-weights", path, weights->step,
                           weights->weights_only ? ", weights only" : ""));
      warn_about_input(weights->input, path, data, warn);
      return;
    }
    if (cfg.resume == "none") return;
    std::string from = cfg.resume;
    if (cfg.resume == "auto") {
      std::vector<std::string> warnings;
      auto found = find_resume_checkpoint(cfg.checkpoint_dir, layout, &warnings);
      for (const auto& w : warnings) warn(w);
      if (found) {
        log.info("resume: " + found->first);
        from = found->first;
        resume = std::move(found->second);
      } else {
        log.info(fmt::format("resume: no checkpoint in {}, starting fresh", cfg.checkpoint_dir));
      }
    } else {
      if (cfg.resume == "best") from = best_checkpoint_or_fail(cfg, "--resume best");
      resume = load_checkpoint(from, layout);
      log.info(cfg.resume == "best"
                   ? fmt::format("resume: {} (the best checkpoint: test top-1 {:.2f}% at step {})",
                                 from, 100 * resume->best_top1, resume->best_step)
                   : "resume: " + from);
    }
    if (resume) {
      reconcile_best(cfg, from, layout, *resume, log);
      warn_about_input(resume->input, from, data, warn);
      warn_about_changed_settings(resume->config_json, cfg, warn);
      const auto later = later_in_lineage(cfg.checkpoint_dir, resume->run_id, resume->step);
      if (!later.empty()) {
        warn(fmt::format(
            "resume: {} is at step {}, and {} checkpoint(s) of this run at later steps are in {} "
            "(newest {}): they hold the steps this run now replaces, stay until it writes those "
            "steps again, and --resume auto picks them first; move them away if that is not "
            "what you want",
            from, resume->step, later.size(), cfg.checkpoint_dir, later.front()));
      }
    }
  });
  if (model_only && broadcast_model_weights(control, weights, layout)) {
    // Every rank: the model's weights, and the input transform it was trained with.
    use_recorded_input(weights->input, data, log);
    ops.upload(weights->params.data(), model.params().data(),
               weights->params.size() * sizeof(float));
    ops.upload(weights->buffers.data(), model.buffers().data(),
               weights->buffers.size() * sizeof(float));
    std::copy(weights->num_batches_tracked.begin(), weights->num_batches_tracked.end(),
              model.num_batches_tracked().begin());
    if (!cfg.eval_only) {
      log.info("init-weights: training starts at step 0 with a fresh optimizer from that model");
    }
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
  }
  StartState start;
  start.first_step = trainer.step();  // what the trainer runs next: resumed, or 0
  if (model_only && weights) start.model_step = weights->step;
  if (!model_only && resume) start.model_step = resume->step;
  return start;
}

}  // namespace mnist_ddp
