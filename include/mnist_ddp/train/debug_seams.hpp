// debug_seams.hpp — the failure seams the tests drive (--debug-hang-rank, --debug-exit-rank,
// --debug-desync-rank, --debug-slow): a rank that stops answering, a rank that dies, a rank that
// issues a collective its peers do not, at a fixed step; a rank one of whose phases is slow. Kept
// apart from the training step so the step itself holds production code only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/dist/comm.hpp"
#include "mnist_ddp/train/step_phases.hpp"

namespace mnist_ddp {

// Before training step `step`: where the configuration names this rank (comm.rank()) and the step
// is 3, hangs forever, exits with status 1 (without MPI_Finalize), or issues one extra
// collective on comm; otherwise returns.
void debug_seams_before_step(const Config& cfg, Comm& comm, std::int64_t step);

// --debug-slow RANK:PHASE:MS: that rank sleeps MS milliseconds at the end of PHASE every step (a
// straggler whose slowness the all-reduce would otherwise spread over every rank).
struct DebugSlow {
  int rank = -1;
  Phase phase = Phase::Backward;
  double ms = 0;
};
std::optional<DebugSlow> parse_debug_slow(const std::string& text);
// At the end of phase p on this rank: the delay, where the seam names them.
void debug_slow_phase(const DebugSlow& slow, int rank, Phase p);

}  // namespace mnist_ddp
