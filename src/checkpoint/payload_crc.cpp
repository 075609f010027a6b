// payload_crc.cpp — the payload CRC32 of a checkpoint (checkpoint.hpp: payload_crc32): every
// array and scalar of a training state in schema order, stored in the root's payload_crc32
// attribute and checked on load, apart from the file CRC (file_crc.cpp) that covers the bytes.
#include <zlib.h>

#include <cstdint>
#include <string>

#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/data/dataset.hpp"

namespace mnist_ddp {

// CRC32 over every array and scalar of the payload, in schema order.
std::uint32_t payload_crc32(const TrainingState& s) {
  return payload_crc32(s, s.format_version);
}

std::uint32_t payload_crc32(const TrainingState& s, std::int64_t version) {
  uLong c = crc32(0L, Z_NULL, 0);
  auto add = [&c](const void* p, std::size_t n) {
    c = crc32(c, static_cast<const Bytef*>(p), static_cast<uInt>(n));
  };
  add(s.params.data(), s.params.size() * sizeof(float));
  add(s.buffers.data(), s.buffers.size() * sizeof(float));
  add(s.num_batches_tracked.data(), s.num_batches_tracked.size() * sizeof(std::int64_t));
  add(s.momentum.data(), s.momentum.size() * sizeof(float));
  const std::int64_t scalars[] = {s.step, s.epoch, s.sample_offset, s.world_size,
                                  s.optimizer_steps};
  add(scalars, sizeof scalars);
  for (const auto& arrays : s.rank_arrays) {
    for (const auto& [name, data] : arrays) {
      add(name.data(), name.size());
      add(data.data(), data.size() * sizeof(float));
    }
  }
  if (!s.rank_arrays.empty()) {
    const std::int64_t hook[] = {s.hook_iter, s.hook_rng};
    add(hook, sizeof hook);
  }
  if (s.loss_scale > 0) {
    add(&s.loss_scale, sizeof s.loss_scale);
    add(&s.loss_scale_growth_tracker, sizeof s.loss_scale_growth_tracker);
  }
  if (version >= 2) {
    // Version 2 covers every value the loader reads (a changed byte anywhere either fails a
    // check or this sum): seed, configuration, versions, optimizer settings, hook and scaler
    // state, each string with its length.
    const auto add_str = [&add](const std::string& v) {
      const std::uint64_t n = v.size();
      add(&n, sizeof n);
      add(v.data(), v.size());
    };
    add(&s.seed, sizeof s.seed);
    add_str(s.config_json);
    add_str(s.program_version);
    add_str(s.lr_schedule);
    const double opt[] = {s.base_lr,   s.last_lr,      s.momentum_factor,
                          s.dampening, s.weight_decay, s.loss_scale};
    add(opt, sizeof opt);
    const std::int64_t ints[] = {s.nesterov ? 1 : 0, s.hook_iter, s.hook_rng,
                                 static_cast<std::int64_t>(s.rank_arrays.size()),
                                 s.loss_scale_growth_tracker};
    add(ints, sizeof ints);
  }
  if (s.input.recorded) {
    const double stats[] = {s.input.mean, s.input.std};
    add(stats, sizeof stats);
    const std::int64_t ints[] = {static_cast<std::int64_t>(s.input.labels_crc32),
                                 s.input.train_count, 1, kImageSide, kImageSide};
    add(ints, sizeof ints);
    add(s.input.name.data(), s.input.name.size());
    add(s.input.transform.data(), s.input.transform.size());
  }
  if (version >= 3) {
    const double progress[] = {s.wall_s, s.train_s, s.best_top1};
    add(progress, sizeof progress);
    const std::int64_t counts[] = {s.images_seen, s.best_step};
    add(counts, sizeof counts);
  }
  return static_cast<std::uint32_t>(c);
}

}  // namespace mnist_ddp
