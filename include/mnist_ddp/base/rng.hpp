// rng.hpp — the project's own specified PRNG (SplitMix64), so shuffles and initial weights are the
// same with every compiler and standard library (std::shuffle/std::uniform_* are not).
//
// Specification (also in docs/reproducibility.md):
//   next():   state += 0x9E3779B97F4A7C15; z = state;
//             z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//             return z ^ (z >> 31)
//   below(n): uniform integer in [0, n) by rejection: draw r = next() until
//             r < 2^64 - (2^64 mod n), return r mod n
//   uniform(a, b): a + (b - a) * u with u = (next() >> 40) * 2^-24 (float, 24-bit grid in [0,1))
#pragma once

#include <cstdint>
#include <vector>

namespace mnist_ddp {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  std::uint64_t below(std::uint64_t n);
  float uniform(float a, float b);
  // Standard normal by Box-Muller: u1 = ((next() >> 11) + 0.5) * 2^-53, u2 likewise,
  // sqrt(-2 ln u1) * cos(2 pi u2) (one value per two draws).
  double normal();
  // The whole generator state (checkpoints).
  std::uint64_t state() const { return state_; }

 private:
  std::uint64_t state_;
};

// Fisher–Yates permutation of 0..n-1: for i = n-1 down to 1, swap(p[i], p[below(i + 1)]),
// with the generator seeded by `seed`.
std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed);

}  // namespace mnist_ddp
