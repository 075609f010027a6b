// schema.hpp — the checkpoint format (checkpoint.hpp documents it) as one write/read pair per
// group of the file: the root's state attributes, /model, /optimizer, /rng, /rank, /amp,
// /progress and /data. Each pair is symmetric: what write_X stores, read_X reads back and validates
// (a missing member of a version-2 file is damage, never a default). The file's identity (format,
// version, model, completeness), its atomic writing and its CRCs are checkpoint.cpp's,
// file_crc.cpp's and payload_crc.cpp's. Private to src/checkpoint/.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <vector>

#include "mnist_ddp/checkpoint/checkpoint.hpp"

namespace mnist_ddp {

// Root attributes: step, epoch, sample_offset, world_size, seed, program_version, config,
// created (written now; not read), run_id (when there is one).
void write_state_attrs(hid_t f, const TrainingState& s);
void read_state_attrs(hid_t f, TrainingState& s);

// /model: every parameter and BN statistic in the layout's shapes, and the num_batches_tracked
// counters; full and weights-only files both hold it. The reader's arenas are already sized.
void write_model_group(hid_t f, const CheckpointLayout& layout, const std::vector<float>& params,
                       const std::vector<float>& buffers, const std::vector<std::int64_t>& tracked);
void read_model_group(hid_t f, const CheckpointLayout& layout, std::vector<float>& params,
                      std::vector<float>& buffers, std::vector<std::int64_t>& tracked);

// /optimizer: SGD's settings and step count, and a momentum buffer per parameter.
void write_optimizer_group(hid_t f, const CheckpointLayout& layout, const TrainingState& s);
void read_optimizer_group(hid_t f, const CheckpointLayout& layout, TrainingState& s);

// /rng: the seeds and the sampler's epoch (the shuffle of epoch e is permutation(seed + e)). They
// repeat the root's seed and epoch; the reader checks that they agree.
void write_rng_group(hid_t f, const TrainingState& s);
void read_rng_group(hid_t f, const TrainingState& s);

// /rank: the communication hook's counters, and each rank's own arrays (PowerSGD's error feedback
// and Q) under /rank/<r>; strict (version 2): every rank's group must be there.
void write_rank_group(hid_t f, const TrainingState& s);
void read_rank_group(hid_t f, bool strict, TrainingState& s);

// /amp: the fp16 loss scale and its growth tracker (loss_scale 0: trained without a scaler).
void write_amp_group(hid_t f, const TrainingState& s);
void read_amp_group(hid_t f, bool strict, TrainingState& s);

// /progress: the run's cumulative time and images, and its best evaluation (version 3 on; an
// older file has none: zeros, no best).
void write_progress_group(hid_t f, const TrainingState& s);
void read_progress_group(hid_t f, TrainingState& s);

// /data: what the model was trained on and how its input is made (version 2 on; a file without
// it is damaged).
void write_input_group(hid_t f, const InputRecord& in);
InputRecord read_input_group(hid_t f);

}  // namespace mnist_ddp
