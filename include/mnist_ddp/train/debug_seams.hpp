// debug_seams.hpp — the failure seams the tests drive (--debug-hang-rank, --debug-exit-rank,
// --debug-desync-rank): a rank that stops answering, a rank that dies, a rank that issues a
// collective its peers do not, at a fixed step. Kept apart from the training
// step so the step itself holds production code only.
#pragma once

#include <cstdint>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/dist/comm.hpp"

namespace mnist_ddp {

// Before training step `step`: where the configuration names this rank (comm.rank()) and the step
// is 3, hangs forever, exits with status 1 (without MPI_Finalize), or issues one extra
// collective on comm; otherwise returns.
void debug_seams_before_step(const Config& cfg, Comm& comm, std::int64_t step);

}  // namespace mnist_ddp
