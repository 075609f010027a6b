// compare.hpp — NaN-proof maxima for the tests' error loops, and the float32 error model their
// bounds come from. `std::max(m, NaN)` keeps m and `if (err > worst)` never fires on NaN, so an
// error loop built on them passes NaN output; every comparison in the suites folds its errors with
// worst_of instead. A bound on a float32 result is float32_gamma(K) times a magnitude the test
// names (the sum of the terms' absolute values, or a tensor's largest element): the worst case of
// any summation order, so it holds for every BLAS/oneDNN kernel family on every CPU kind.
#pragma once

#include <cstddef>

namespace mnist_ddp::testing {

// The running maximum of m and x, where a non-finite x (NaN or infinity) gives +infinity: any
// non-finite element makes the comparison fail.
double worst_of(double m, double x);

// Higham's gamma_k = k u / (1 - k u), u = 2^-24: the worst-case relative error of a float32
// computation whose every result passes through at most k roundings (a sum of k terms in any
// order: |computed - exact| <= gamma_k * sum |term|; Higham, Accuracy and Stability of Numerical
// Algorithms, 2nd ed., 3.1 and 3.5).
double float32_gamma(double k);

}  // namespace mnist_ddp::testing
