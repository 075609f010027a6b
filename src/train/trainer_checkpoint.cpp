// trainer_checkpoint.cpp — the trainer's checkpoint state: what a checkpoint holds of a run
// (model, optimizer, position, lineage, hook and loss-scale state, the input record), writing it
// (rank 0, agreed), retention within the run's lineage, and continuing from one.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mnist_ddp/base/version.hpp"
#include "mnist_ddp/checkpoint/store.hpp"
#include "mnist_ddp/comm/agree.hpp"
#include "mnist_ddp/comm/powersgd.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/train/trainer.hpp"

namespace mnist_ddp {

std::string Trainer::good_checkpoint_advice() const {
  if (last_checkpoint_.empty()) {
    return fmt::format(
        "This run wrote no checkpoint; those in {} are untouched: --resume the newest with a "
        "lower --lr (or more --warmup-steps), or start again",
        opt_.checkpoint.dir);
  }
  return fmt::format(
      "The last good checkpoint is {}: --resume it with a lower --lr (or more --warmup-steps)",
      last_checkpoint_);
}

void Trainer::resume_from(const TrainingState& s) {
  model_.load_state(s.params, s.buffers, s.num_batches_tracked);
  engine_.sgd().restore(s.momentum, s.optimizer_steps);
  rec_.step = s.step;
  rec_.epoch = s.epoch;
  rec_.offset = s.sample_offset;
  last_checkpoint_step_ = s.step;
  // The lineage continues; a checkpoint of a version without run ids starts a new one (its own
  // files then count as another run's: --keep leaves them alone).
  if (!s.run_id.empty()) run_id_ = s.run_id;
  // The run's totals go on from the checkpoint's (zeros from a file older than version 3).
  rec_.wall_before = s.wall_s;
  rec_.train_before = s.train_s;
  rec_.images_before = s.images_seen;
  rec_.best_top1 = s.best_top1;
  rec_.best_step = s.best_step;
  if (engine_.scaler() != nullptr && s.loss_scale > 0) {
    engine_.scaler()->set_state(LossScalerState{
        static_cast<float>(s.loss_scale), static_cast<std::int32_t>(s.loss_scale_growth_tracker)});
  } else if (engine_.scaler() != nullptr) {
    log_.info(
        "resume: the checkpoint has no loss scale (trained without --amp fp16); starting "
        "the scaler at 65536");
  }
  if (PowerSgd* p = engine_.reducer().powersgd()) {
    const std::int64_t iter = s.hook_iter >= 0 ? s.hook_iter : s.step;
    if (s.rank_arrays.size() == static_cast<std::size_t>(comm_.size())) {
      p->restore(s.rank_arrays[static_cast<std::size_t>(comm_.rank())], iter, s.hook_rng);
    } else {
      if (!s.rank_arrays.empty()) {
        log_.info(fmt::format(
            "resume: PowerSGD error feedback of {} ranks cannot map onto {}; starting it from "
            "zero (new Qs)",
            s.rank_arrays.size(), comm_.size()));
      }
      p->restore(
          {}, iter,
          s.hook_iter >= 0 ? s.hook_rng : static_cast<std::int64_t>(opt_.gradients.powersgd.seed));
    }
  }
  if (s.world_size != comm_.size()) {
    // Another world size: the sampler hands out other per-rank lists, so only the number of
    // samples of this epoch already consumed carries over.
    const std::int64_t consumed = s.sample_offset * s.world_size;
    rec_.offset = consumed / comm_.size();
  }
}

TrainingState Trainer::state() const {
  TrainingState s;
  s.step = rec_.step;
  s.epoch = rec_.epoch;
  s.sample_offset = rec_.offset;
  s.world_size = comm_.size();
  s.seed = opt_.schedule.seed;
  s.config_json = stored_config_;
  s.program_version = kVersion;
  s.run_id = run_id_;
  // What the model was trained on and exactly how its input was made (the floats gather uses).
  s.input.recorded = true;
  s.input.name = data_.name;
  s.input.mean = data_.mean;
  s.input.std = data_.std;
  s.input.labels_crc32 = data_.crc32;
  s.input.train_count = data_.train.count;
  ConvNet& model = model_;  // a reference member: the device arenas are read, not changed
  s.params.resize(model.params().size());
  s.buffers.resize(model.buffers().size());
  s.momentum.resize(engine_.sgd().momentum_buffer().size());
  ops_.download(model.params().data(), s.params.data(), s.params.size() * sizeof(float));
  ops_.download(model.buffers().data(), s.buffers.data(), s.buffers.size() * sizeof(float));
  ops_.download(engine_.sgd().momentum_buffer().data(), s.momentum.data(),
                s.momentum.size() * sizeof(float));
  s.num_batches_tracked.assign(model.num_batches_tracked().begin(),
                               model.num_batches_tracked().end());
  s.optimizer_steps = engine_.sgd().steps_taken();
  s.lr_schedule = name_in(kLrScheduleNames, opt_.optimizer.lr.schedule);
  s.base_lr = opt_.optimizer.lr.base_lr;
  s.last_lr = rec_.last_lr;
  s.momentum_factor = opt_.optimizer.sgd.momentum;
  s.dampening = opt_.optimizer.sgd.dampening;
  s.weight_decay = opt_.optimizer.sgd.weight_decay;
  s.nesterov = opt_.optimizer.sgd.nesterov;
  if (PowerSgd* p = engine_.reducer().powersgd()) {
    s.hook_iter = p->iter();
    s.hook_rng = p->rng_state();
  }
  if (engine_.scaler() != nullptr) {
    const LossScalerState a = engine_.scaler()->state();
    s.loss_scale = a.scale;
    s.loss_scale_growth_tracker = a.growth_tracker;
  }
  const RunTotals t = totals();
  s.wall_s = t.wall_s;
  s.train_s = t.train_s;
  s.images_seen = t.images_seen;
  s.best_top1 = rec_.best_top1;
  s.best_step = rec_.best_step;
  return s;
}

StepPosition Trainer::position() const {
  return StepPosition{rec_.step, rec_.epoch, total_steps_, totals()};
}

RunTotals Trainer::totals() const {
  return RunTotals{rec_.wall_before + process_seconds(), rec_.train_before + clock_.seconds(),
                   rec_.images_before + rec_.images};
}

void Trainer::consider_best(const EvalResult& e) {
  if (!opt_.checkpoint.keep_best || e.top1 <= rec_.best_top1)
    return;  // a tie keeps the earlier one
  rec_.best_top1 = e.top1;
  rec_.best_step = rec_.step;
  rec_.best_due = true;
}

std::vector<std::vector<std::pair<std::string, std::vector<float>>>> Trainer::gather_hook_state() {
  std::vector<std::vector<std::pair<std::string, std::vector<float>>>> out;
  PowerSgd* p = engine_.reducer().powersgd();
  if (p == nullptr) return out;
  // Every rank holds the same names and sizes (the hook runs in lockstep), only the values
  // (error feedback) differ.
  const auto mine = p->state();
  if (mine.empty()) return out;
  out.resize(static_cast<std::size_t>(comm_.size()));
  for (const auto& [name, data] : mine) {
    std::vector<float> all(data.size() * static_cast<std::size_t>(comm_.size()));
    // Collective: rank r's array lands at block r on every rank (rank 0 writes them).
    comm_.allgather(std::span<const float>(data), all);
    for (std::size_t r = 0; r < out.size(); ++r) {
      out[r].emplace_back(
          name,
          std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(r * data.size()),
                             all.begin() + static_cast<std::ptrdiff_t>((r + 1) * data.size())));
    }
  }
  return out;
}

void Trainer::checkpoint(const char* why, bool preemption) {
  // This state is already on disk, unless an evaluation after that write made it the best: the
  // file is then written again (the same model and position) so that it records being the best.
  const bool best_here = rec_.best_due && rec_.best_step == rec_.step;
  if (last_checkpoint_step_ == rec_.step && !best_here) return;
  std::string best;
  const HostTraceScope span(tracer_, preemption ? "preemption checkpoint" : "checkpoint",
                            SpanArgs{.step = rec_.step});
  std::string path;
  auto hook_state = gather_hook_state();
  // Collective (inside run_agreed): rank 0 holds everything a checkpoint needs (parameters and
  // momentum are identical on every rank; BN buffers follow rank 0), so only it writes; the
  // agreement tells every rank whether the write worked.
  run_agreed(comm_, [&] {
    if (comm_.rank() != 0) return;
    TrainingState s = state();
    s.rank_arrays = std::move(hook_state);
    try {
      path = save_checkpoint(opt_.checkpoint.dir, s, layout_);
    } catch (const UserError& e) {
      if (e.exit_code() != kExitTrainingDiverged) throw;
      throw UserError(fmt::format("training diverged by step {} (lr {:g}): {}. {}", rec_.step,
                                  rec_.last_lr, e.what(), good_checkpoint_advice()),
                      kExitTrainingDiverged);
    }
    // --keep-best: its second name first, so that retention cannot rotate it away.
    if (best_here) best = keep_as_best(opt_.checkpoint.dir, path);
    if (preemption) {
      const std::string replaced = roll_preemption_checkpoint(opt_.checkpoint.dir, path);
      if (!replaced.empty()) log_.info("preemption checkpoint replaces " + replaced);
    }
    // Retention within this run's lineage only (another run's files are never deleted), up to
    // this step: the lineage's later files, of steps a resume from an older checkpoint replaces,
    // are neither counted nor deleted (this run overwrites them when it reaches their steps).
    const Retention kept =
        prune_checkpoints(opt_.checkpoint.dir, opt_.checkpoint.keep, run_id_, rec_.step);
    if (!kept.foreign.empty() && !foreign_reported_) {
      foreign_reported_ = true;
      log_.info(fmt::format(
          "checkpoints: {} file(s) in {} belong to another run or an older mnist_ddp (e.g. {}): "
          "--keep {} counts and deletes only this run's (run id {})",
          kept.foreign.size(), opt_.checkpoint.dir, kept.foreign.front(), opt_.checkpoint.keep,
          run_id_));
    }
  });
  last_checkpoint_step_ = rec_.step;
  if (best_here) rec_.best_due = false;
  if (comm_.rank() == 0) {
    last_checkpoint_ = path;
    report_.checkpoint(position(), path, why, rec_.offset, preemption);
    if (!best.empty()) report_.best(position(), rec_.best_top1, best);
  }
}

}  // namespace mnist_ddp
