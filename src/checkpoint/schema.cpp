// schema.cpp — the checkpoint's groups, each written and read by one pair (schema.hpp).
#include "schema.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <string>
#include <utility>

#include "hdf5_io.hpp"
#include "mnist_ddp/data/dataset.hpp"
#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

std::string iso_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

// ---- root attributes
// -----------------------------------------------------------------------------
void write_state_attrs(hid_t f, const TrainingState& s) {
  attr_i64(f, "step", s.step);
  attr_i64(f, "epoch", s.epoch);
  attr_i64(f, "sample_offset", s.sample_offset);
  attr_i64(f, "world_size", s.world_size);
  attr_u64(f, "seed", s.seed);
  attr_str(f, "program_version", s.program_version);
  attr_str(f, "config", s.config_json);
  attr_str(f, "created", iso_now());
  if (!s.run_id.empty()) attr_str(f, "run_id", s.run_id);
}

void read_state_attrs(hid_t f, TrainingState& s) {
  s.step = read_i64(f, "step");
  s.epoch = read_i64(f, "epoch");
  s.sample_offset = read_i64(f, "sample_offset");
  s.world_size = read_i64(f, "world_size");
  s.seed = read_u64(f, "seed");
  s.program_version = read_str(f, "program_version");
  s.config_json = read_str(f, "config");
  if (has_attr(f, "run_id")) s.run_id = read_str(f, "run_id");
}

// ---- /model
// ----------------------------------------------------------------------------------------
void write_model_group(hid_t f, const CheckpointLayout& layout, const std::vector<float>& params,
                       const std::vector<float>& buffers,
                       const std::vector<std::int64_t>& tracked) {
  const H5Handle g = create_group(f, "model");
  for (const auto& e : layout.params) write_f32(g.get(), e.name, e.shape, params.data() + e.offset);
  for (const auto& e : layout.buffers)
    write_f32(g.get(), e.name, e.shape, buffers.data() + e.offset);
  for (std::size_t i = 0; i < layout.num_batches_tracked.size(); ++i)
    write_i64_scalar(g.get(), layout.num_batches_tracked[i], tracked[i]);
}

void read_model_group(hid_t f, const CheckpointLayout& layout, std::vector<float>& params,
                      std::vector<float>& buffers, std::vector<std::int64_t>& tracked) {
  const H5Handle g = open_group(f, "model");
  for (const auto& e : layout.params)
    read_f32(g.get(), e.name, e.shape, params.data() + e.offset, "/model");
  for (const auto& e : layout.buffers)
    read_f32(g.get(), e.name, e.shape, buffers.data() + e.offset, "/model");
  for (const auto& k : layout.num_batches_tracked)
    tracked.push_back(read_i64_scalar(g.get(), k, "/model"));
}

// ---- /optimizer
// ------------------------------------------------------------------------------------
void write_optimizer_group(hid_t f, const CheckpointLayout& layout, const TrainingState& s) {
  const H5Handle g = create_group(f, "optimizer");
  attr_i64(g.get(), "step_count", s.optimizer_steps);
  attr_str(g.get(), "lr_schedule", s.lr_schedule);
  attr_f64(g.get(), "base_lr", s.base_lr);
  attr_f64(g.get(), "last_lr", s.last_lr);
  attr_f64(g.get(), "momentum", s.momentum_factor);
  attr_f64(g.get(), "dampening", s.dampening);
  attr_f64(g.get(), "weight_decay", s.weight_decay);
  attr_i64(g.get(), "nesterov", s.nesterov ? 1 : 0);
  const H5Handle m = create_group(g.get(), "momentum_buffer");
  for (const auto& e : layout.params)
    write_f32(m.get(), e.name, e.shape, s.momentum.data() + e.offset);
}

void read_optimizer_group(hid_t f, const CheckpointLayout& layout, TrainingState& s) {
  const H5Handle g = open_group(f, "optimizer");
  s.optimizer_steps = read_i64(g.get(), "step_count");
  s.lr_schedule = read_str(g.get(), "lr_schedule");
  s.base_lr = read_f64(g.get(), "base_lr");
  s.last_lr = read_f64(g.get(), "last_lr");
  s.momentum_factor = read_f64(g.get(), "momentum");
  s.dampening = read_f64(g.get(), "dampening");
  s.weight_decay = read_f64(g.get(), "weight_decay");
  s.nesterov = read_i64(g.get(), "nesterov") != 0;
  const H5Handle m = open_group(g.get(), "momentum_buffer");
  for (const auto& e : layout.params)
    read_f32(m.get(), e.name, e.shape, s.momentum.data() + e.offset, "/optimizer/momentum_buffer");
}

// ---- /rng
// ------------------------------------------------------------------------------------------
void write_rng_group(hid_t f, const TrainingState& s) {
  const H5Handle g = create_group(f, "rng");
  attr_u64(g.get(), "init_seed", s.seed);
  attr_u64(g.get(), "sampler_seed", s.seed);
  attr_i64(g.get(), "sampler_epoch", s.epoch);
}

void read_rng_group(hid_t f, const TrainingState& s) {
  // Nothing in it that the root does not hold: read only to catch a file whose two disagree
  // (edited by hand; mnist_ddp never writes that).
  if (!has_link(f, "rng")) return;
  const H5Handle g = open_group(f, "rng");
  const std::uint64_t init = read_u64(g.get(), "init_seed");
  const std::uint64_t sampler = read_u64(g.get(), "sampler_seed");
  const std::int64_t epoch = read_i64(g.get(), "sampler_epoch");
  if (init != s.seed || sampler != s.seed || epoch != s.epoch) {
    throw UserError(fmt::format(
        "/rng (init_seed {}, sampler_seed {}, sampler_epoch {}) disagrees with the file's seed {} "
        "and epoch {}: the file is damaged",
        init, sampler, epoch, s.seed, s.epoch));
  }
}

// ---- /rank
// -----------------------------------------------------------------------------------------
void write_rank_group(hid_t f, const TrainingState& s) {
  const H5Handle g = create_group(f, "rank");
  attr_i64(g.get(), "hook_iter", s.hook_iter);
  attr_i64(g.get(), "hook_rng", s.hook_rng);
  for (std::int64_t r = 0; r < s.world_size; ++r) {
    const H5Handle rg = create_group(g.get(), std::to_string(r).c_str());
    if (static_cast<std::size_t>(r) >= s.rank_arrays.size()) continue;
    for (const auto& [name, data] : s.rank_arrays[static_cast<std::size_t>(r)])
      write_f32(rg.get(), name, {static_cast<int>(data.size())}, data.data());
  }
}

void read_rank_group(hid_t f, bool strict, TrainingState& s) {
  const H5Handle g = open_group(f, "rank");
  if (strict || has_attr(g.get(), "hook_iter")) {
    s.hook_iter = read_i64(g.get(), "hook_iter");
    s.hook_rng = read_i64(g.get(), "hook_rng");
  }
  std::vector<std::vector<std::pair<std::string, std::vector<float>>>> ranks;
  bool any = false;
  for (std::int64_t r = 0; r < s.world_size; ++r) {
    ranks.emplace_back();
    const std::string rn = std::to_string(r);
    if (!has_link(g.get(), rn.c_str())) {
      if (strict) throw UserError(fmt::format("/rank/{} is missing: the file is damaged", rn));
      continue;
    }
    const H5Handle rg = open_group(g.get(), rn.c_str());
    H5G_info_t info{};
    HDF5_CHECK(H5Gget_info(rg.get(), &info));
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      char name[256] = {0};
      HDF5_CHECK(H5Lget_name_by_idx(rg.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name,
                                    H5P_DEFAULT));
      H5Handle ds(HDF5_CHECK(H5Dopen2(rg.get(), name, H5P_DEFAULT)), H5Dclose);
      H5Handle space(HDF5_CHECK(H5Dget_space(ds.get())), H5Sclose);
      const hssize_t n = H5Sget_simple_extent_npoints(space.get());
      std::vector<float> data(static_cast<std::size_t>(std::max<hssize_t>(n, 0)));
      read_f32(rg.get(), name, {static_cast<int>(data.size())}, data.data(), "/rank/" + rn);
      ranks.back().emplace_back(name, std::move(data));
      any = true;
    }
  }
  if (any) s.rank_arrays = std::move(ranks);
}

// ---- /amp
// ------------------------------------------------------------------------------------------
void write_amp_group(hid_t f, const TrainingState& s) {
  // Always (version 2): loss_scale 0 says "trained without --amp fp16", so a missing group is
  // damage, never a silent default.
  const H5Handle g = create_group(f, "amp");
  attr_f64(g.get(), "loss_scale", s.loss_scale);
  attr_i64(g.get(), "growth_tracker", s.loss_scale_growth_tracker);
}

void read_amp_group(hid_t f, bool strict, TrainingState& s) {
  if (!strict && !has_link(f, "amp")) return;  // version 1: written only with a scaler
  const H5Handle g = open_group(f, "amp");
  s.loss_scale = read_f64(g.get(), "loss_scale");
  s.loss_scale_growth_tracker = read_i64(g.get(), "growth_tracker");
  // 0: trained without a scaler (version 2 always writes the group).
  if (!(std::isfinite(s.loss_scale) && (s.loss_scale > 0 || (strict && s.loss_scale == 0)))) {
    throw UserError(
        fmt::format("/amp loss_scale {} is not a positive finite number", s.loss_scale));
  }
}

// ---- /progress
// -------------------------------------------------------------------------------------
void write_progress_group(hid_t f, const TrainingState& s) {
  const H5Handle g = create_group(f, "progress");
  attr_f64(g.get(), "wall_s", s.wall_s);
  attr_f64(g.get(), "train_s", s.train_s);
  attr_i64(g.get(), "images_seen", s.images_seen);
  attr_f64(g.get(), "best_top1", s.best_top1);
  attr_i64(g.get(), "best_step", s.best_step);
}

void read_progress_group(hid_t f, TrainingState& s) {
  if (!has_link(f, "progress")) {
    throw UserError("no /progress group (the run's totals): the file is damaged");
  }
  const H5Handle g = open_group(f, "progress");
  s.wall_s = read_f64(g.get(), "wall_s");
  s.train_s = read_f64(g.get(), "train_s");
  s.images_seen = read_i64(g.get(), "images_seen");
  s.best_top1 = read_f64(g.get(), "best_top1");
  s.best_step = read_i64(g.get(), "best_step");
  const bool times_ok = std::isfinite(s.wall_s) && std::isfinite(s.train_s) && s.wall_s >= 0 &&
                        s.train_s >= 0 && s.images_seen >= 0;
  const bool best_ok =
      (s.best_step == -1 && s.best_top1 == -1) ||
      (s.best_step >= 0 && s.best_step <= s.step && s.best_top1 >= 0 && s.best_top1 <= 1);
  if (!times_ok || !best_ok) {
    throw UserError(fmt::format(
        "/progress holds impossible values (wall_s {}, train_s {}, images_seen {}, best_top1 {} "
        "at step {}): the file is damaged",
        s.wall_s, s.train_s, s.images_seen, s.best_top1, s.best_step));
  }
}

// ---- /data
// -----------------------------------------------------------------------------------------
void write_input_group(hid_t f, const InputRecord& in) {
  MNIST_DDP_CHECK(in.recorded, "a checkpoint records its input (/data)");
  const H5Handle g = create_group(f, "data");
  attr_str(g.get(), "name", in.name);
  attr_f64(g.get(), "mean", in.mean);
  attr_f64(g.get(), "std", in.std);
  attr_u64(g.get(), "labels_crc32", in.labels_crc32);
  attr_i64(g.get(), "train_count", in.train_count);
  attr_i64_array(g.get(), "image_shape", {1, kImageSide, kImageSide});
  attr_str(g.get(), "transform", in.transform);
}

InputRecord read_input_group(hid_t f) {
  if (!has_link(f, "data")) {
    throw UserError("no /data group (the input transform): the file is damaged");
  }
  const H5Handle g = open_group(f, "data");
  InputRecord in;
  in.recorded = true;
  in.name = read_str(g.get(), "name");
  in.mean = read_f64(g.get(), "mean");
  in.std = read_f64(g.get(), "std");
  in.labels_crc32 = static_cast<std::uint32_t>(read_u64(g.get(), "labels_crc32"));
  in.train_count = read_i64(g.get(), "train_count");
  in.transform = read_str(g.get(), "transform");
  if (read_i64_array(g.get(), "image_shape") !=
      std::vector<std::int64_t>{1, kImageSide, kImageSide}) {
    throw UserError("/data image_shape is not (1, 28, 28): this model takes 28x28 images");
  }
  if (!(std::isfinite(in.mean) && std::isfinite(in.std) && in.std > 0)) {
    throw UserError(
        fmt::format("/data mean {} / std {} are not a usable normalisation", in.mean, in.std));
  }
  return in;
}

}  // namespace mnist_ddp
