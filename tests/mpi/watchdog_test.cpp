// watchdog_test.cpp — collectives that cannot hang silently, under mpirun: --debug-collectives
// names the first collective the ranks disagree on (expected vs actual) on every rank, agrees
// when they do not, and the watchdog reports a collective in flight past its timeout exactly once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/process/watchdog.hpp"

namespace mnist_ddp {
namespace {

TEST(DebugCollectives, AgreeingRanksPass) {
  auto comm = make_mpi_comm();
  comm->set_debug_collectives(true);
  std::vector<float> f(7, 1.f);
  std::vector<std::int64_t> i(3, 2);
  EXPECT_NO_THROW({
    comm->allreduce(std::span<float>(f), ReduceOp::Sum);
    comm->broadcast(std::span<std::int64_t>(i), 0);
    comm->allreduce(std::span<float>(f), ReduceOp::Max);
  });
  EXPECT_EQ(f[0], static_cast<float>(comm->size()));
}

TEST(DebugCollectives, FirstMismatchIsNamedOnEveryRank) {
  auto comm = make_mpi_comm();
  if (comm->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  comm->set_debug_collectives(true);
  std::vector<float> f(4, 1.f);
  comm->allreduce(std::span<float>(f), ReduceOp::Sum);  // #1 agrees
  // #2: the last rank passes one element fewer (a rank-local branch gone wrong).
  const bool odd = comm->rank() == comm->size() - 1;
  std::string what;
  try {
    comm->allreduce(std::span<float>(f.data(), odd ? 3 : 4), ReduceOp::Sum);
  } catch (const UserError& e) {
    what = e.what();
  }
  const std::string want = "rank 0 (expected) issues #2 allreduce 4 x f32, rank " +
                           std::to_string(comm->size() - 1) +
                           " (actual) issues #2 allreduce 3 x f32";
  EXPECT_NE(what.find(want), std::string::npos) << what;
}

// Time comes from a clock the test moves, so nothing here depends on how fast a loaded 2-core
// machine runs the watchdog's thread: "not yet" holds however long the test waits, and "fired
// once" is waited for with a generous bound.
TEST(Watchdog, ReportsACollectivePastItsTimeoutOnce) {
  std::atomic<int> aborts{0};
  std::atomic<std::int64_t> now_ms{0};
  const auto clock = [&now_ms] {
    return CollectiveWatchdog::Clock::time_point(std::chrono::milliseconds(now_ms.load()));
  };
  CollectiveWatchdog wd(
      0.3, 5, "nodeX", [&] { aborts++; }, clock);
  const auto a = wd.begin("allreduce 10 x f32");
  wd.end(a);
  const auto b = wd.begin("broadcast 96 x f32");  // never completes
  now_ms = 290;  // just short of the timeout: several of the watchdog's checks pass meanwhile
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(aborts.load(), 0) << "fired before the timeout";
  now_ms = 410;
  for (int i = 0; i < 200 && aborts.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(aborts.load(), 1);
  now_ms = 5000;  // long past it: still reported once
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(aborts.load(), 1);
  EXPECT_EQ(b, a + 1);
  const std::string m = CollectiveWatchdog::timeout_message(5, "nodeX", 2, "broadcast 96 x f32",
                                                            0.41, 1, "allreduce 10 x f32", 0.3);
  EXPECT_NE(m.find("rank 5 (host nodeX): collective #2 (broadcast 96 x f32) has not completed "
                   "after 0.4 s"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("last one completed on this rank was #1 (allreduce 10 x f32)"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace mnist_ddp
