// powersgd.hpp — PowerSGD gradient compression (Vogels et al., 2019) with the semantics of
// PyTorch's powerSGD_hook and batched_powerSGD_hook (torch.distributed.algorithms.ddp_comm_hooks):
//   - plain all-reduce (sum, then divide) for the first start_iter steps;
//   - error feedback: the bucket plus last step's local error is compressed, and the new error is
//     (that input) - (what the all-reduce handed back), every element of the bucket included;
//   - per-tensor variant: every tensor of the bucket with more than one dimension, viewed as
//     rows = shape[0] x cols = rest (conv OIHW -> out x in*k*k; fc out x in), is compressed when
//     rows*cols >= (rows+cols)*r*min_compression_rate, r = min(rank, rows, cols); the others (1-D
//     tensors and matrices not worth it) are all-reduced uncompressed in one buffer;
//   - batched variant: the whole bucket zero-padded into one side x side matrix,
//     side = ceil(sqrt(numel));
//   - P = M Q, all-reduce(P) (sum), Gram-Schmidt on P's columns, Q = M^T P, all-reduce(Q), Q /= R,
//     M ~ P Q^T; Q is warm-started (kept, re-orthogonalised each step); a new Q is drawn N(0,1)
//     from a generator seeded identically on every rank, so every rank draws the same Q.
//   - fp16: P, Q (and the uncompressed buffer, and the warm-up all-reduce) travel as IEEE fp16,
//     summed in 16 bits; the arithmetic stays in float32 (PyTorch's fp16_compress_wrapper also
//     computes in fp16).
// Matrices are row-major. Runs on host memory (the CPU backend).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/comm/comm.hpp"

namespace mnist_ddp {

struct PowerSgdConfig {
  int rank = 2;
  std::int64_t start_iter = 1000;
  double min_compression_rate = 2.0;
  bool batched = false;
  bool fp16 = false;
  std::uint64_t seed = 0;  // of the generator that draws new Qs (same on every rank)
};

// One tensor of a bucket: elements [offset, offset + rows*cols) of the bucket. rows = 0 marks a
// 1-D tensor (never compressed).
struct BucketTensor {
  std::size_t offset = 0;
  std::size_t rows = 0;
  std::size_t cols = 0;
};

// Gram-Schmidt on the columns of m[rows][cols] (row-major), in place: each column is divided by
// its norm (a zero column stays zero), then removed from the columns after it.
void orthogonalize(float* m, std::size_t rows, std::size_t cols);
// PyTorch's _should_compress.
bool should_compress(std::size_t rows, std::size_t cols, int rank, double min_compression_rate);
// ceil(sqrt(numel)): the side of the batched variant's square matrix.
std::size_t square_side(std::size_t numel);

// A named float array of per-rank state (checkpointed under /rank/<r>/<name>).
using NamedArray = std::pair<std::string, std::vector<float>>;

class PowerSgd {
 public:
  // buckets[b]: the tensors of bucket b; sizes[b]: its element count.
  PowerSgd(Comm& comm, const PowerSgdConfig& cfg, std::vector<std::vector<BucketTensor>> buckets,
           std::vector<std::size_t> sizes);
  // Replaces grads (bucket b of this step) by its compressed average over the ranks. Collective.
  void reduce(std::size_t b, std::span<float> grads);
  // End of a step (after every bucket): PyTorch's maybe_increase_iter.
  void next_iter() { ++iter_; }
  std::int64_t iter() const { return iter_; }
  // Elements this rank handed to collectives for bucket b in its last reduce (wire payload).
  std::uint64_t last_payload_bytes() const { return last_payload_bytes_; }

  // Checkpoint: the error-feedback buffers and Qs (this rank's), the step counter and the
  // generator state. restore() takes what state() gave (another world size: do not call it).
  std::vector<NamedArray> state() const;
  std::int64_t rng_state() const { return static_cast<std::int64_t>(rng_.state()); }
  void restore(const std::vector<NamedArray>& arrays, std::int64_t iter, std::int64_t rng_state);

 private:
  void allreduce_sum(std::span<float> data);  // float32 or fp16 on the wire
  void new_q(std::span<float> q, std::size_t rows, std::size_t cols);
  void reduce_per_tensor(std::size_t b, std::span<float> input);
  void reduce_batched(std::size_t b, std::span<float> input);
  std::size_t error_elements(std::size_t b) const;  // of bucket b's error-feedback buffer
  std::size_t q_elements(std::size_t b) const;      // of bucket b's packed Qs

  Comm& comm_;
  PowerSgdConfig cfg_;
  std::vector<std::vector<BucketTensor>> buckets_;
  std::vector<std::size_t> sizes_;
  std::int64_t iter_ = 0;
  SplitMix64 rng_;
  std::vector<std::vector<float>> error_;  // per bucket (empty until first used)
  std::vector<std::vector<float>> q_;      // per bucket: every compressed tensor's Q, packed
  std::vector<float> scratch_, p_;
  std::vector<std::uint16_t> wire16_;
  std::uint64_t last_payload_bytes_ = 0;
};

}  // namespace mnist_ddp
