// broadcast.hpp — collectives that move what rank 0 read from a checkpoint to every rank (rank
// 0 alone reads the file, so every rank starts from exactly its bytes).
#pragma once

#include <optional>

#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/comm/comm.hpp"

namespace mnist_ddp {

// Collective: rank 0's weights (if any) to every rank. Returns whether there were some.
bool broadcast_model_weights(Comm& comm, std::optional<ModelWeights>& weights,
                             const CheckpointLayout& layout);

// Collective: rank 0's loaded state (if any) to every rank. Returns whether there was one.
bool broadcast_training_state(Comm& comm, std::optional<TrainingState>& state,
                              const CheckpointLayout& layout);

}  // namespace mnist_ddp
