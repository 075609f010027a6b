// compare.hpp — NaN-proof maxima for the tests' error loops. `std::max(m, NaN)` keeps m and
// `if (err > worst)` never fires on NaN, so an error loop built on them passes NaN output; every
// comparison in the suites folds its errors with worst_of instead.
#pragma once

#include <cstddef>

namespace mnist_ddp::testing {

// The running maximum of m and x, where a non-finite x (NaN or infinity) gives +infinity: any
// non-finite element makes the comparison fail.
double worst_of(double m, double x);

}  // namespace mnist_ddp::testing
