// rng.cpp — SplitMix64 and the Fisher–Yates permutation (specified in rng.hpp).
#include "mnist_ddp/base/rng.hpp"

#include <cmath>
#include <numbers>
#include <numeric>
#include <utility>

namespace mnist_ddp {

std::uint64_t SplitMix64::next() {
  state_ += 0x9E3779B97F4A7C15ULL;
  std::uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::uint64_t SplitMix64::below(std::uint64_t n) {
  if (n <= 1) return 0;
  // Reject the top partial block so every residue is equally likely.
  const std::uint64_t limit = -n % n;  // == 2^64 mod n
  for (;;) {
    const std::uint64_t r = next();
    if (r >= limit) return r % n;
  }
}

double SplitMix64::normal() {
  const double u1 = (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

float SplitMix64::uniform(float a, float b) {
  const float u = static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  return a + (b - a) * u;
}

std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), std::int64_t{0});
  SplitMix64 rng(seed);
  for (std::int64_t i = n - 1; i >= 1; --i) {
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i) + 1));
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
  }
  return p;
}

}  // namespace mnist_ddp
