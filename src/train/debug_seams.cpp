// debug_seams.cpp — the hang and exit seams of the failure tests.
#include "mnist_ddp/train/debug_seams.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

namespace mnist_ddp {

void debug_seams_before_step(const Config& cfg, Comm& comm, std::int64_t step) {
  if (step != 3) return;
  const int rank = comm.rank();
  if (rank == cfg.debug_hang_rank) {
    // This rank stops here; its peers wait in the next collective until the watchdog
    // (--collective-timeout) names it and aborts the job.
    std::fprintf(stderr, "mnist_ddp: --debug-hang-rank %d: rank %d stops before step 3\n",
                 cfg.debug_hang_rank, rank);
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  if (rank == cfg.debug_exit_rank) {
    // A rank that dies with an error, without MPI_Finalize.
    std::fprintf(stderr, "mnist_ddp: --debug-exit-rank %d: rank %d exits with status 1\n",
                 cfg.debug_exit_rank, rank);
    std::fflush(stderr);
    std::_Exit(1);
  }
  if (rank == cfg.debug_desync_rank) {
    std::fprintf(stderr,
                 "mnist_ddp: --debug-desync-rank %d: rank %d issues an extra collective before "
                 "step 3\n",
                 cfg.debug_desync_rank, rank);
    std::fflush(stderr);
    std::int32_t extra[2] = {0, 0};
    // Collective on this rank only (the seam): its peers' next collective is another one.
    comm.allreduce(std::span<std::int32_t>(extra, 2), ReduceOp::Sum);
  }
}

std::optional<DebugSlow> parse_debug_slow(const std::string& text) {
  const auto a = text.find(':'), b = text.rfind(':');
  if (a == std::string::npos || b == a) return std::nullopt;
  DebugSlow s;
  try {
    std::size_t used = 0;
    s.rank = std::stoi(text.substr(0, a), &used);
    if (used != a || s.rank < 0) return std::nullopt;
    const std::string ms = text.substr(b + 1);
    s.ms = std::stod(ms, &used);
    if (used != ms.size() || !(s.ms > 0) || s.ms > 1e6) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const auto phase = value_in(kPhaseNames, text.substr(a + 1, b - a - 1));
  if (!phase || *phase == Phase::Comm) return std::nullopt;
  s.phase = *phase;
  return s;
}

void debug_slow_phase(const DebugSlow& slow, int rank, Phase p) {
  if (rank != slow.rank || p != slow.phase) return;
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(slow.ms));
}

}  // namespace mnist_ddp
