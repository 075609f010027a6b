// watchdog.cpp — the collective watchdog thread (watchdog.hpp).
#include "mnist_ddp/process/watchdog.hpp"

#include <fmt/format.h>

#include <cstdio>

namespace mnist_ddp {

CollectiveWatchdog::CollectiveWatchdog(double timeout_s, int rank, std::string host,
                                       std::function<void()> abort,
                                       std::function<Clock::time_point()> clock)
    : timeout_s_(timeout_s),
      rank_(rank),
      host_(std::move(host)),
      abort_(std::move(abort)),
      clock_(clock ? std::move(clock) : std::function<Clock::time_point()>(&Clock::now)) {
  thread_ = std::thread([this] { loop(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::uint64_t CollectiveWatchdog::begin(std::string what) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t seq = next_++;
  in_flight_.emplace(seq, InFlight{std::move(what), clock_()});
  return seq;
}

void CollectiveWatchdog::end(std::uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_flight_.find(seq);
  if (it == in_flight_.end()) return;
  if (seq > last_completed_) {
    last_completed_ = seq;
    last_completed_what_ = it->second.what;
  }
  in_flight_.erase(it);
}

std::string CollectiveWatchdog::timeout_message(int rank, const std::string& host,
                                                std::uint64_t seq, const std::string& what,
                                                double seconds, std::uint64_t last_completed,
                                                const std::string& last_what, double timeout_s) {
  return fmt::format(
      "mnist_ddp: error: rank {} (host {}): collective #{} ({}) has not completed after {:.1f} s "
      "(--collective-timeout {:g}); the last one completed on this rank was #{} ({}). A peer rank "
      "is stuck, dead or issuing other collectives (--debug-collectives finds the latter); "
      "aborting the whole job.",
      rank, host, seq, what, seconds, timeout_s, last_completed, last_what);
}

void CollectiveWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (stop_ || in_flight_.empty()) continue;
    // The oldest collective still in flight.
    const auto& [seq, op] = *in_flight_.begin();
    const double waited = std::chrono::duration<double>(clock_() - op.since).count();
    if (waited < timeout_s_) continue;
    const std::string msg = timeout_message(rank_, host_, seq, op.what, waited, last_completed_,
                                            last_completed_what_, timeout_s_);
    std::fprintf(stderr, "%s\n", msg.c_str());
    std::fflush(stderr);
    lock.unlock();
    abort_();  // in production it does not return (ncclCommAbort / MPI_Abort)
    lock.lock();
    stop_ = true;  // a test's callback returns: report once, then stop watching
  }
}

}  // namespace mnist_ddp
