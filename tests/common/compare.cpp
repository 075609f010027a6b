// compare.cpp — NaN-proof maxima for the tests (compare.hpp).
#include "compare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mnist_ddp::testing {

double worst_of(double m, double x) {
  if (!std::isfinite(x) || !std::isfinite(m)) return std::numeric_limits<double>::infinity();
  return std::max(m, x);
}

}  // namespace mnist_ddp::testing
