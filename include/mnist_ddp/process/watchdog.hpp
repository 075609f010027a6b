// watchdog.hpp — collectives never hang silently. Every collective a Comm issues is registered
// (op, element count, dtype, start time, a per-rank sequence number); a watchdog thread checks
// once per 100 ms and, when one has been in flight longer than --collective-timeout, prints which
// rank, which collective, its sequence number and the last one completed, then aborts the whole
// job (ncclCommAbort + MPI_Abort through the abort callback) with exit code 4.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace mnist_ddp {

inline constexpr int kExitCollectiveTimeout = 4;

class CollectiveWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // timeout_s > 0. abort: ends every rank of the job; must not return. clock: where time comes
  // from (default: the steady clock; tests pass their own, so no assertion depends on timing).
  CollectiveWatchdog(double timeout_s, int rank, std::string host, std::function<void()> abort,
                     std::function<Clock::time_point()> clock = {});
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // A collective starts (what: "allreduce 29034 x f32"); returns its sequence number.
  std::uint64_t begin(std::string what);
  // That collective completed.
  void end(std::uint64_t seq);
  // The message the watchdog prints for a collective stuck for `seconds` (for tests).
  static std::string timeout_message(int rank, const std::string& host, std::uint64_t seq,
                                     const std::string& what, double seconds,
                                     std::uint64_t last_completed, const std::string& last_what,
                                     double timeout_s);

 private:
  struct InFlight {
    std::string what;
    Clock::time_point since;
  };
  void loop();

  double timeout_s_;
  int rank_;
  std::string host_;
  std::function<void()> abort_;
  std::function<Clock::time_point()> clock_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::uint64_t next_ = 1;
  std::uint64_t last_completed_ = 0;
  std::string last_completed_what_ = "none";
  std::map<std::uint64_t, InFlight> in_flight_;
  std::thread thread_;  // last: started once the state above exists
};

}  // namespace mnist_ddp
