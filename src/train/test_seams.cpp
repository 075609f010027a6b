// test_seams.cpp — every seam the tests drive (test_seams.hpp).
#include "mnist_ddp/train/test_seams.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <thread>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {

void debug_seams_before_step(const SeamOptions& seams, Comm& comm, std::int64_t step) {
  if (step != 3) return;
  const int rank = comm.rank();
  if (rank == seams.hang_rank) {
    // This rank stops here; its peers wait in the next collective until the watchdog
    // (--collective-timeout) names it and aborts the job.
    std::fprintf(stderr, "mnist_ddp: --debug-hang-rank %d: rank %d stops before step 3\n",
                 seams.hang_rank, rank);
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  if (rank == seams.exit_rank) {
    // A rank that dies with an error, without MPI_Finalize.
    std::fprintf(stderr, "mnist_ddp: --debug-exit-rank %d: rank %d exits with status 1\n",
                 seams.exit_rank, rank);
    std::fflush(stderr);
    std::_Exit(1);
  }
  if (rank == seams.desync_rank) {
    std::fprintf(stderr,
                 "mnist_ddp: --debug-desync-rank %d: rank %d issues an extra collective before "
                 "step 3\n",
                 seams.desync_rank, rank);
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

std::string debug_slow_text(const DebugSlow& s) {
  return fmt::format("{}:{}:{}", s.rank, name_in(kPhaseNames, s.phase), s.ms);
}

void debug_slow_phase(const DebugSlow& slow, int rank, Phase p) {
  if (rank != slow.rank || p != slow.phase) return;
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(slow.ms));
}

void append_sample_log(const std::string& dir, std::int64_t epoch, int rank,
                       const std::vector<std::int64_t>& order, std::int64_t first,
                       std::int64_t last) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = fmt::format("{}/samples-epoch{}-rank{}.txt", dir, epoch + 1, rank);
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    throw UserError(
        fmt::format("--debug-sample-log: cannot append to {}: {}", path, std::strerror(errno)));
  }
  bool ok = true;
  for (std::int64_t i = first; i < last && ok; ++i)
    ok = std::fprintf(f, "%lld\n", static_cast<long long>(order[static_cast<std::size_t>(i)])) > 0;
  if (std::fclose(f) != 0 || !ok) {
    throw UserError(
        fmt::format("--debug-sample-log: cannot write {}: {}", path, std::strerror(errno)));
  }
}

std::optional<int> ranks_per_node_seam() {
  const char* k = std::getenv("MNIST_DDP_TEST_RANKS_PER_NODE");
  if (k == nullptr) return std::nullopt;
  const std::string v = k;
  const bool digits = !v.empty() && v.size() < 7 && std::all_of(v.begin(), v.end(), [](char ch) {
    return ch >= '0' && ch <= '9';
  });
  if (!digits || std::stoi(v) < 1) {
    throw UserError(fmt::format(
        "MNIST_DDP_TEST_RANKS_PER_NODE={}: this test seam takes a positive number of ranks per "
        "pretend node; unset it outside the tests",
        v));
  }
  return std::stoi(v);
}

void checkpoint_write_seam(const std::string& tmp) {
  const char* f = std::getenv("MNIST_DDP_TEST_FAIL_CHECKPOINT");
  if (f == nullptr) return;
  if (std::string(f) != "enospc") {
    throw UserError(
        fmt::format("MNIST_DDP_TEST_FAIL_CHECKPOINT={}: this test seam only understands 'enospc'; "
                    "unset it for normal runs",
                    f));
  }
  throw UserError(fmt::format("{}: write failed: {} (injected)", tmp, std::strerror(ENOSPC)));
}

}  // namespace mnist_ddp
