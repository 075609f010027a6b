// replicas.hpp — what keeps the replicas one model: broadcast of parameters and BN buffers from
// rank 0, gradient averaging over the flat arena, and the replica-consistency check. (The bucketed,
// overlapped Reducer and compression hooks build on this.)
#pragma once

#include <cstdint>
#include <span>

#include "mnist_ddp/base/amp_mode.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/grad_scaler.hpp"

namespace mnist_ddp {

// The Comm passed to broadcast_*/average_gradients works on the model's memory (MPI for CPU,
// NCCL or host-staged MPI for a GPU). num_batches_tracked is host memory and goes separately.
// Parameters, BN buffers and num_batches_tracked from rank 0 to every rank.
void broadcast_model(Comm& comm, ConvNet& model, Comm& host_comm);
// BN running statistics from rank 0 (DDP's broadcast_buffers=True, before every forward).
void broadcast_buffers(Comm& comm, ConvNet& model, Comm& host_comm);
// grads = sum over ranks / world, one all-reduce of the whole arena.
void average_gradients(Comm& comm, ConvNet& model);

// --amp fp16, between the gradient average and the optimizer step: grads *= 1/scale, then the
// found-inf flag all-reduced (max) over comm, so every rank skips the step or none does.
void unscale_and_agree(GradScaler& scaler, Comm& comm, std::span<float> grads);

// FNV-1a 64 over the bytes of the parameters (BN buffers are rank-local between broadcasts);
// read from backend memory through the model's Ops.
std::uint64_t replica_hash(ConvNet& model);

// SyncBatchNorm's exchanges over comm (host memory), for Ops::set_bn_sync: the forward
// all-gathers every rank's per-channel [mean, biased var, count] and combines them exactly
// (unequal counts included): N = sum n_r, mean = sum n_r mean_r / N,
// var = sum n_r (var_r + (mean_r - mean)^2) / N; the backward all-reduces
// [sum_dy, sum_dy_xmu] and the count. The BnSync refers to comm: keep comm alive while it is set.
BnSync make_sync_bn(Comm& comm);
// All-gathers replica_hash over the host comm; if any rank differs from rank 0, throws UserError
// (exit code kExitReplicaDiverged) on every rank naming the diverged ranks and the step.
void check_replicas(Comm& host_comm, ConvNet& model, std::int64_t step);

}  // namespace mnist_ddp
