// sampler.cpp — DistributedSampler and evaluation sharding.
#include "mnist_ddp/data/sampler.hpp"

#include <numeric>

#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {

DistributedSampler::DistributedSampler(std::int64_t dataset_size, int rank, int world, bool shuffle,
                                       std::uint64_t seed, bool drop_last)
    : n_(dataset_size),
      rank_(rank),
      world_(world),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  MNIST_DDP_CHECK(world >= 1 && rank >= 0 && rank < world, "bad rank/world for the sampler");
  MNIST_DDP_CHECK(dataset_size >= 0, "negative dataset size");
  if (drop_last_ && n_ % world_ != 0) {
    num_samples_ = n_ / world_;  // PyTorch: ceil((n - R) / R) == floor(n / R)
  } else {
    num_samples_ = (n_ + world_ - 1) / world_;
  }
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  std::vector<std::int64_t> all;
  if (shuffle_) {
    all = permutation(n_, seed_ + static_cast<std::uint64_t>(epoch_));
  } else {
    all.resize(static_cast<std::size_t>(n_));
    std::iota(all.begin(), all.end(), std::int64_t{0});
  }
  const std::int64_t total = total_size();
  if (static_cast<std::int64_t>(all.size()) < total && n_ > 0) {
    // Pad by repeating the head (cyclically if more padding than data, like PyTorch).
    const std::int64_t base = n_;
    for (std::int64_t i = 0; static_cast<std::int64_t>(all.size()) < total; ++i) {
      all.push_back(all[static_cast<std::size_t>(i % base)]);
    }
  }
  all.resize(static_cast<std::size_t>(total));
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(num_samples_));
  for (std::int64_t i = rank_; i < total; i += world_)
    mine.push_back(all[static_cast<std::size_t>(i)]);
  return mine;
}

Shard eval_shard(std::int64_t n, int rank, int world) {
  MNIST_DDP_CHECK(world >= 1 && rank >= 0 && rank < world, "bad rank/world for eval_shard");
  return {n * rank / world, n * (rank + 1) / world};
}

}  // namespace mnist_ddp
