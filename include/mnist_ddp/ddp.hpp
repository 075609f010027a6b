// ddp.hpp — what keeps the replicas one model: broadcast of parameters and BN buffers from rank 0,
// gradient averaging over the flat arena, and the replica-consistency check. (The bucketed,
// overlapped Reducer and compression hooks build on this.)
#pragma once

#include <cstdint>

#include "mnist_ddp/comm.hpp"
#include "mnist_ddp/model.hpp"

namespace mnist_ddp {

// Parameters, BN buffers and num_batches_tracked from rank 0 to every rank.
void broadcast_model(Comm& comm, ConvNet& model);
// BN running statistics from rank 0 (DDP's broadcast_buffers=True, before every forward).
void broadcast_buffers(Comm& comm, ConvNet& model);
// grads = sum over ranks / world, one all-reduce of the whole arena.
void average_gradients(Comm& comm, ConvNet& model);

// FNV-1a 64 over the bytes of the parameters (BN buffers are rank-local between broadcasts).
std::uint64_t replica_hash(ConvNet& model);
// All-gathers replica_hash; if any rank differs from rank 0, throws UserError (exit code
// kExitReplicaDiverged) on every rank naming the diverged ranks and the step.
void check_replicas(Comm& comm, ConvNet& model, std::int64_t step);

}  // namespace mnist_ddp
