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

// n floats uniform in [lo, hi) from SplitMix64(seed): the same numbers on every machine.
std::vector<float> uniform_floats(std::size_t n, std::uint64_t seed, float lo = -1, float hi = 1);

}  // namespace mnist_ddp::testing
