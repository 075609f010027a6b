// compare.cpp — NaN-proof maxima and the float32 error model of the tests (compare.hpp).
#include "compare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mnist_ddp::testing {

double worst_of(double m, double x) {
  if (!std::isfinite(x) || !std::isfinite(m)) return std::numeric_limits<double>::infinity();
  return std::max(m, x);
}

double float32_gamma(double k) {
  const double ku = k * std::ldexp(1.0, -24);
  return ku / (1 - ku);
}

}  // namespace mnist_ddp::testing
