// test_util.cpp — helpers shared by the unit tests.
#include "test_util.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/ops/ops.hpp"

namespace mnist_ddp::testing {

void expect_user_error(const std::function<void()>& fn, const std::string& file,
                       const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << "no error for " << file;
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(file), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << m;
  }
}

Config parse_flags(std::vector<std::string> args) {
  args.insert(args.begin(), "mnist_ddp");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  Config c;
  EXPECT_EQ(parse_cli(static_cast<int>(argv.size()), argv.data(), c, false), ParseOutcome::Run);
  return c;
}

double step_float32_terms(int n, bool forward_only) {
  const double forward = 25 + 400 + 1568;
  return forward_only ? forward : forward + n + 10 + 800 + n * 14.0 * 14 + n * 28.0 * 28;
}

std::vector<float> uniform_floats(std::size_t n, std::uint64_t seed, float lo, float hi) {
  SplitMix64 r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = r.uniform(lo, hi);
  return v;
}

std::vector<std::uint32_t> bit_patterns(const std::vector<float>& v, std::size_t k) {
  std::vector<std::uint32_t> u(std::min(k, v.size()));
  if (!u.empty()) std::memcpy(u.data(), v.data(), u.size() * sizeof(float));
  return u;
}

ComputeThreads::ComputeThreads(int threads) : before_(omp_get_max_threads()) {
  set_compute_threads(threads);
}

ComputeThreads::~ComputeThreads() {
  set_compute_threads(before_);
}

}  // namespace mnist_ddp::testing
