// checkpoint.hpp — the HDF5 checkpoint format: one file per checkpoint written by rank 0,
// atomically (temporary name in the same directory, fsync, rename, directory fsync; the `complete`
// attribute is the last thing written), Fletcher32 on every array plus a CRC32 over the whole
// payload, validated on load, newest-first resume with fallback, keep-last-K retention.
//
// Schema (format "mnist_ddp-checkpoint", version 3; documented with h5dump in docs/checkpoints.md):
//   /                 attrs: format, format_version, model, step, epoch, sample_offset,
//                     world_size, seed, program_version, config (JSON), created, payload_crc32,
//                     run_id (the lineage: made when a run starts fresh, kept across resumes;
//                     absent in files of older versions, covered by the file CRC), complete
//                     (written last)
//   /model/<key>      float32 PyTorch shapes; num_batches_tracked int64 scalars
//   /optimizer/momentum_buffer/<key>   float32, same keys and shapes as the parameters
//   /optimizer        attrs: step_count, lr_schedule, base_lr, last_lr, momentum, dampening,
//                     weight_decay, nesterov
//   /rng              attrs: init_seed, sampler_seed, sampler_epoch (the shuffle of epoch e is
//                     permutation(sampler_seed + e): that is all the RNG state there is)
//   /rank             attrs: hook_iter, hook_rng (PowerSGD's step counter and generator state)
//   /rank/<r>/<name>  float32 1-D per-rank state: PowerSGD's error feedback (powersgd_error_<b>)
//                     and Q (powersgd_q_<b>) of bucket b; empty groups for the other hooks
//   /amp              attrs: loss_scale, growth_tracker (--amp fp16's scaler; loss_scale 0 without)
//   /data             attrs: name, mean, std (float64: exactly what training normalised with),
//                     labels_crc32, train_count, image_shape (1, 28, 28), transform (readable)
//                     (version 2; version 1 files load without it, with a warning on resume)
//   /progress         attrs: wall_s, train_s, images_seen (the run's totals over every process
//                     of its lineage up to this state), best_top1, best_step (its best evaluation
//                     so far; -1: none) (version 3; older files load with zeros and no best)
// The payload CRC32 covers every array, the scalars, the hook state, /amp and /data.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mnist_ddp/model/model.hpp"

namespace mnist_ddp {

inline constexpr const char* kCheckpointFormat = "mnist_ddp-checkpoint";
inline constexpr std::int64_t kCheckpointVersion = 3;
// The oldest version this program still reads (1: no /data record).
inline constexpr std::int64_t kCheckpointOldestVersion = 1;
// How mnist_ddp turns a raw image into the model's input (recorded in /data transform).
inline constexpr const char* kInputTransform =
    "x = (pixel / 255 - mean) / std, NCHW float32 (pixel: uint8 in [0, 255], shape N x 1 x 28 x "
    "28)";

// What a model was trained on and how its input is made: enough to use the checkpoint alone.
struct InputRecord {
  bool recorded = false;  // false: a version-1 checkpoint (no /data)
  std::string name;       // the dataset's name (DIR/DATASET), e.g. "fashion-mnist (...)"
  double mean = 0;        // training pixels scaled to [0,1]: exactly the float training used
  double std = 1;
  std::uint32_t labels_crc32 = 0;  // of the training labels
  std::int64_t train_count = 0;
  std::string transform = kInputTransform;
};
inline constexpr const char* kCheckpointModel = "mnist-convnet-v1";

struct TrainingState {
  std::int64_t step = 0;           // optimizer steps taken
  std::int64_t epoch = 0;          // epoch in progress (0-based)
  std::int64_t sample_offset = 0;  // samples of `epoch` this rank has consumed (its sampler index)
  std::int64_t world_size = 1;
  std::uint64_t seed = 0;
  std::string config_json;
  std::string program_version;
  std::string run_id;          // the lineage ("" in files of versions before it existed)
  std::vector<float> params;   // model parameter arena (PyTorch layout)
  std::vector<float> buffers;  // BN running statistics arena
  std::vector<std::int64_t> num_batches_tracked;  // per BN layer
  std::vector<float> momentum;                    // SGD momentum buffers, same layout as params
  std::int64_t optimizer_steps = 0;
  std::string lr_schedule;
  double base_lr = 0, last_lr = 0, momentum_factor = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  // Per-rank gradient-hook state: rank_arrays[r] is rank r's (/rank/<r>/); empty without one.
  std::vector<std::vector<std::pair<std::string, std::vector<float>>>> rank_arrays;
  std::int64_t hook_iter = -1;  // PowerSGD's step counter; -1: written without PowerSGD
  std::int64_t hook_rng = 0;
  // --amp fp16's loss scaler (/amp); loss_scale 0: written without one.
  double loss_scale = 0;
  std::int64_t loss_scale_growth_tracker = 0;
  std::int64_t format_version = kCheckpointVersion;  // of the file it was read from
  InputRecord input;                                 // /data
  // /progress (version 3): the run's totals up to this state, over all its processes (a resumed
  // or requeued run adds its own to them), and its best evaluation so far.
  double wall_s = 0;             // wall-clock seconds of the processes, from their start
  double train_s = 0;            // of those, seconds in training steps
  std::int64_t images_seen = 0;  // training images consumed, all ranks together
  double best_top1 = -1;         // best test top-1 (a fraction) of the run; -1: none yet
  std::int64_t best_step = -1;   // the step it was measured at
};

// A model alone: what --init-weights starts from and --eval-only evaluates. From a full
// checkpoint, or from a weights-only one (tools/import_from_pytorch.py: root attribute
// contents = "weights", /model and /data only, weights_crc32 over every dataset's name and bytes
// in name order and the /data record).
struct ModelWeights {
  std::vector<float> params;
  std::vector<float> buffers;
  std::vector<std::int64_t> num_batches_tracked;
  InputRecord input;
  std::int64_t step = 0;  // of the checkpoint it came from (0 for imported weights)
  bool weights_only = false;
};

// The names and shapes of the model's tensors (from ConvNet) that the file must match.
struct CheckpointLayout {
  std::vector<ArenaEntry> params;
  std::vector<ArenaEntry> buffers;
  std::vector<std::string> num_batches_tracked;  // dataset keys, e.g. layer1.1.num_batches_tracked
};
CheckpointLayout checkpoint_layout(const ConvNet& model);

// The first model or optimizer tensor of the state holding a non-finite value, as
// "/model/fc.weight (12 of 15680 values non-finite)", or "" when every value is finite.
std::string first_non_finite(const TrainingState& state, const CheckpointLayout& layout);

// A function save_checkpoint calls with the temporary's path once its bytes are written, before
// the fsync and rename: the test seam of a full disk (train/test_seams.hpp) is injected here by
// the app layer, so this layer never calls up into the trainer's. Throwing discards the write.
using CheckpointWriteHook = std::function<void(const std::string& tmp)>;
void set_checkpoint_write_hook(CheckpointWriteHook hook);

// Writes dir/ckpt-<step>.h5 atomically and returns its path. A state holding a non-finite value
// is never written: UserError (exit code kExitTrainingDiverged) naming the tensor, nothing on
// disk touched. On any failure (full disk, I/O
// error) the temporary is removed, every existing checkpoint is untouched, and a UserError says
// what happened.
std::string save_checkpoint(const std::string& dir, const TrainingState& state,
                            const CheckpointLayout& layout);

// Reads and validates one file (format, version, model, completeness, every shape, Fletcher32
// checksums, payload CRC32, every value finite). UserError naming the file and the problem
// (the tensor, for a non-finite value) otherwise.
TrainingState load_checkpoint(const std::string& path, const CheckpointLayout& layout);

// The payload CRC32 a checkpoint of this state carries (its /data part only when
// state.input.recorded: a version-1 file's CRC never covered one). For tests and tools.
std::uint32_t payload_crc32(const TrainingState& state);
// The same, as a file of format `version` covers it (a state read from an older file is written
// back as the current version).
std::uint32_t payload_crc32(const TrainingState& state, std::int64_t version);

// The model of a full or weights-only checkpoint, validated (shapes, Fletcher32, the file's CRC).
// UserError naming the file and the problem otherwise.
ModelWeights load_model_weights(const std::string& path, const CheckpointLayout& layout);

// Who wrote a checkpoint, read after its file CRC checks out. readable false: damaged or not a
// checkpoint (its owner cannot be known: --keep never deletes it, and resume skips it). run_id ""
// in a readable file: written before run ids existed (or a weights-only file).
struct CheckpointOwner {
  bool readable = false;
  std::string run_id;
};
CheckpointOwner checkpoint_owner(const std::string& path);
// checkpoint_owner(path).run_id.
std::string checkpoint_run_id(const std::string& path);

// Recomputes the file CRC in a checkpoint's first 512 bytes (an HDF5 user block: "mnist_ddp-
// file-crc32 XXXXXXXX size N", the CRC32 of every later byte, checked before HDF5 parses the
// file). For tools and tests that edit a checkpoint on purpose.
void refresh_file_crc(const std::string& path);

}  // namespace mnist_ddp
