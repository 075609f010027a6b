// sampler.hpp — torch.utils.data.DistributedSampler semantics with our own PRNG, and the exact
// (unpadded) evaluation shard.
//
//   shuffle: indices = permutation(n, seed + epoch) (rng.hpp), else 0..n-1
//   not drop_last: num_samples = ceil(n / R); pad to R * num_samples by repeating the head
//   drop_last:     num_samples = floor(n / R); truncate to R * num_samples
//   rank r takes indices[r], indices[r + R], ...
#pragma once

#include <cstdint>
#include <vector>

namespace mnist_ddp {

class DistributedSampler {
 public:
  DistributedSampler(std::int64_t dataset_size, int rank, int world, bool shuffle,
                     std::uint64_t seed, bool drop_last);
  // Like PyTorch: the shuffle of each epoch depends on (seed, epoch); call before each epoch.
  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  std::int64_t epoch() const { return epoch_; }
  std::int64_t num_samples() const { return num_samples_; }
  std::int64_t total_size() const { return num_samples_ * world_; }
  // This rank's indices for the current epoch (num_samples() of them).
  std::vector<std::int64_t> indices() const;

 private:
  std::int64_t n_;
  int rank_;
  int world_;
  bool shuffle_;
  std::uint64_t seed_;
  bool drop_last_;
  std::int64_t epoch_ = 0;
  std::int64_t num_samples_;
};

// Contiguous evaluation shard [begin, end) of rank r: every one of n items belongs to exactly one
// rank, sizes differ by at most one, nothing is padded.
struct Shard {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};
Shard eval_shard(std::int64_t n, int rank, int world);

}  // namespace mnist_ddp
