// broadcast.cpp — moving what rank 0 read from a checkpoint to every rank: the whole training
// state on resume, a model alone for --init-weights and --eval-only.
#include "mnist_ddp/checkpoint/broadcast.hpp"

#include <cstring>
#include <span>

namespace mnist_ddp {

bool broadcast_model_weights(Comm& comm, std::optional<ModelWeights>& weights,
                             const CheckpointLayout& layout) {
  std::int64_t head[5] = {0, 0, 0, 0, 0};
  if (comm.rank() == 0 && weights) {
    head[0] = 1;
    head[1] = weights->step;
    head[2] = weights->input.recorded ? 1 : 0;
    std::memcpy(&head[3], &weights->input.mean, sizeof(double));
    std::memcpy(&head[4], &weights->input.std, sizeof(double));
  }
  // Collective: whether rank 0 has weights, their step and input transform (doubles as bits).
  comm.broadcast(std::span<std::int64_t>(head, 5), 0);
  if (head[0] == 0) return false;
  if (comm.rank() != 0) {
    weights.emplace();
    weights->step = head[1];
    weights->input.recorded = head[2] != 0;
    std::memcpy(&weights->input.mean, &head[3], sizeof(double));
    std::memcpy(&weights->input.std, &head[4], sizeof(double));
    weights->params.resize(layout.params.back().offset + layout.params.back().numel);
    weights->buffers.resize(layout.buffers.back().offset + layout.buffers.back().numel);
    weights->num_batches_tracked.resize(layout.num_batches_tracked.size());
  }
  // Collective: rank 0 alone read the file; every rank gets exactly its model.
  comm.broadcast(std::span<float>(weights->params), 0);
  comm.broadcast(std::span<float>(weights->buffers), 0);
  comm.broadcast(std::span<std::int64_t>(weights->num_batches_tracked), 0);
  return true;
}

bool broadcast_training_state(Comm& comm, std::optional<TrainingState>& state,
                              const CheckpointLayout& layout) {
  std::int64_t head[7] = {0, 0, 0, 0, 0, 0, 0};
  if (comm.rank() == 0 && state) {
    head[0] = 1;
    head[1] = state->step;
    head[2] = state->epoch;
    head[3] = state->sample_offset;
    head[4] = state->world_size;
    head[5] = state->optimizer_steps;
    head[6] = static_cast<std::int64_t>(state->seed);
  }
  // Collective: whether rank 0 resumes, and the position; then the arrays.
  comm.broadcast(std::span<std::int64_t>(head, 7), 0);
  if (head[0] == 0) return false;
  if (comm.rank() != 0) {
    state.emplace();
    state->step = head[1];
    state->epoch = head[2];
    state->sample_offset = head[3];
    state->world_size = head[4];
    state->optimizer_steps = head[5];
    state->seed = static_cast<std::uint64_t>(head[6]);
    const std::size_t np = layout.params.back().offset + layout.params.back().numel;
    const std::size_t nb = layout.buffers.back().offset + layout.buffers.back().numel;
    state->params.resize(np);
    state->momentum.resize(np);
    state->buffers.resize(nb);
    state->num_batches_tracked.resize(layout.num_batches_tracked.size());
  }
  // Collective: rank 0 alone read the file; every rank resumes from exactly its state.
  comm.broadcast(std::span<float>(state->params), 0);
  comm.broadcast(std::span<float>(state->momentum), 0);
  comm.broadcast(std::span<float>(state->buffers), 0);
  comm.broadcast(std::span<std::int64_t>(state->num_batches_tracked), 0);
  // Collective: the per-rank hook state. Sizes first, so every rank can allocate; names travel
  // as their bytes packed into int64 words.
  // The loss scale (a double) travels as its bits.
  std::int64_t scale_bits = 0;
  std::memcpy(&scale_bits, &state->loss_scale, sizeof scale_bits);
  std::int64_t meta[5] = {static_cast<std::int64_t>(state->rank_arrays.size()), state->hook_iter,
                          state->hook_rng, scale_bits, state->loss_scale_growth_tracker};
  comm.broadcast(std::span<std::int64_t>(meta, 5), 0);
  state->rank_arrays.resize(static_cast<std::size_t>(meta[0]));
  state->hook_iter = meta[1];
  state->hook_rng = meta[2];
  std::memcpy(&state->loss_scale, &meta[3], sizeof state->loss_scale);
  state->loss_scale_growth_tracker = meta[4];
  // Collective: the input transform the model was trained with (doubles as bits), which every
  // rank normalises its batches with from now on.
  std::int64_t input[3] = {state->input.recorded ? 1 : 0, 0, 0};
  std::memcpy(&input[1], &state->input.mean, sizeof(double));
  std::memcpy(&input[2], &state->input.std, sizeof(double));
  comm.broadcast(std::span<std::int64_t>(input, 3), 0);
  state->input.recorded = input[0] != 0;
  std::memcpy(&state->input.mean, &input[1], sizeof(double));
  std::memcpy(&state->input.std, &input[2], sizeof(double));
  // Collective: the run's totals and its best evaluation (doubles as bits): every rank decides
  // alike whether an evaluation is a new best (--keep-best checkpoints it, a collective).
  std::int64_t progress[5] = {0, 0, state->images_seen, 0, state->best_step};
  std::memcpy(&progress[0], &state->wall_s, sizeof(double));
  std::memcpy(&progress[1], &state->train_s, sizeof(double));
  std::memcpy(&progress[3], &state->best_top1, sizeof(double));
  comm.broadcast(std::span<std::int64_t>(progress, 5), 0);
  std::memcpy(&state->wall_s, &progress[0], sizeof(double));
  std::memcpy(&state->train_s, &progress[1], sizeof(double));
  state->images_seen = progress[2];
  std::memcpy(&state->best_top1, &progress[3], sizeof(double));
  state->best_step = progress[4];
  for (auto& arrays : state->rank_arrays) {
    std::int64_t count = static_cast<std::int64_t>(arrays.size());
    comm.broadcast(std::span<std::int64_t>(&count, 1), 0);
    arrays.resize(static_cast<std::size_t>(count));
    for (auto& [name, data] : arrays) {
      std::int64_t sizes[2] = {static_cast<std::int64_t>(name.size()),
                               static_cast<std::int64_t>(data.size())};
      comm.broadcast(std::span<std::int64_t>(sizes, 2), 0);
      std::vector<std::int64_t> words(static_cast<std::size_t>(sizes[0] + 7) / 8, 0);
      std::memcpy(words.data(), name.data(), name.size());
      comm.broadcast(std::span<std::int64_t>(words), 0);
      name.assign(reinterpret_cast<const char*>(words.data()), static_cast<std::size_t>(sizes[0]));
      data.resize(static_cast<std::size_t>(sizes[1]));
      comm.broadcast(std::span<float>(data), 0);
    }
  }
  return true;
}

}  // namespace mnist_ddp
