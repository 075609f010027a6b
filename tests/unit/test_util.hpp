// test_util.hpp — helpers shared by the unit tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mnist_ddp/app/cli.hpp"

namespace mnist_ddp::testing {

// Expects fn to throw UserError whose message contains both `file` and `what`.
void expect_user_error(const std::function<void()>& fn, const std::string& file,
                       const std::string& what);

// The configuration these flags parse to (argv[0] added); a parse that does not return Run fails
// the test.
Config parse_flags(std::vector<std::string> args);

// Runs the scope at `threads` compute threads (set_compute_threads: OpenMP, BLAS), then restores
// the OpenMP count from before: the oneDNN backend's choice of kernels depends on it.
class ComputeThreads {
 public:
  explicit ComputeThreads(int threads);
  ~ComputeThreads();
  ComputeThreads(const ComputeThreads&) = delete;
  ComputeThreads& operator=(const ComputeThreads&) = delete;

 private:
  int before_;
};

// The error model of one training step of the ConvNet at batch n in float32: the lengths of its
// float32 sums added along the step (forward: conv1 25, conv2 400, fc 1568 terms; backward: the
// fc's n and 10, conv2's data gradient 800 and filter gradient n x 14 x 14, conv1's filter gradient
// n x 28 x 28; BN's sums run in double). A result's relative error, against the largest element of
// its tensor, stays within float32_gamma of this (compare.hpp); `forward_only` counts the forward.
double step_float32_terms(int n, bool forward_only = false);

// n floats uniform in [lo, hi) from SplitMix64(seed): the same numbers on every machine.
std::vector<float> uniform_floats(std::size_t n, std::uint64_t seed, float lo = -1, float hi = 1);

// The bit patterns of v (so -0 differs from +0 and NaNs compare), whole or its first k elements.
std::vector<std::uint32_t> bit_patterns(const std::vector<float>& v, std::size_t k = SIZE_MAX);

}  // namespace mnist_ddp::testing
