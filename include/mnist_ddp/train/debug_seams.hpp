// debug_seams.hpp — the failure seams the tests drive (--debug-hang-rank, --debug-exit-rank): a
// rank that stops answering, a rank that dies, at a fixed step. Kept apart from the training
// step so the step itself holds production code only.
#pragma once

#include <cstdint>

#include "mnist_ddp/app/cli.hpp"

namespace mnist_ddp {

// Before training step `step` on `rank`: hangs forever or exits with status 1 (without
// MPI_Finalize) where the configuration names this rank and the step is 3; otherwise returns.
void debug_seams_before_step(const Config& cfg, int rank, std::int64_t step);

}  // namespace mnist_ddp
