// flight_recorder.hpp — what each rank was doing when it stopped. Every communicator keeps a ring
// of its last N collectives (--flight-recorder N; sequence number, op, dtype, count, bytes, the
// training step, state and times). Each rank dumps all its rings as flight-rank<R>.json into
// --log-dir when the watchdog fires, a desync is detected, the rank fails with an error, a stop
// signal arrives (SIGTERM/SIGINT), or on the dump signal (--flight-dump-signal, USR2 by default:
// dump and keep running). tools/flight_analyze reads every rank's dump and names the rank that
// is missing, stuck or disagreeing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mnist_ddp/base/dtype.hpp"
#include "mnist_ddp/launch/placement.hpp"

namespace mnist_ddp {

// Started: the rank is inside the collective (host-blocking, or a host request not yet
// complete). Enqueued: handed to a device stream (NCCL); the host does not see it finish.
// Completed: done on this rank.
enum class FlightState : std::uint8_t { Started, Enqueued, Completed };
inline constexpr std::array<NameOf<FlightState>, 3> kFlightStateNames{
    {{FlightState::Started, "started"},
     {FlightState::Enqueued, "enqueued"},
     {FlightState::Completed, "completed"}}};

struct FlightEntry {
  std::uint64_t seq = 0;  // the communicator's own collective number (same on every rank)
  const char* op = "";    // a string literal ("allreduce", "broadcast", ...)
  DType type = DType::F32;
  std::uint64_t count = 0;
  std::int64_t step = -1;  // the training step it belongs to (-1: before training)
  FlightState state = FlightState::Started;
  double started_s = 0;  // seconds since the recorder was made
  double ended_s = -1;   // when it reached `state` (-1: still started)
};

class FlightRecorder;

// One communicator's last `capacity` collectives. Written by the thread issuing the collectives,
// read by the dumping thread: a mutex held for a few stores, never across a collective.
class FlightRing {
 public:
  FlightRing(const FlightRecorder& owner, std::string name, int size, std::size_t capacity);
  void begin(std::uint64_t seq, const char* op, std::size_t count, DType type);
  void end(std::uint64_t seq, FlightState state);
  // A capture that failed part-way: the collectives numbered after `seq` never ran.
  void forget_after(std::uint64_t seq);
  // The entries, oldest first.
  std::vector<FlightEntry> snapshot() const;
  const std::string& name() const { return name_; }
  int size() const { return size_; }

 private:
  const FlightRecorder& owner_;
  std::string name_;
  int size_;
  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;  // [seq % capacity]
  std::uint64_t newest_ = 0;       // the largest seq begun
};

class FlightRecorder {
 public:
  // Off (open() returns nullptr, dump() writes nothing) until arm().
  FlightRecorder(int rank, int world, std::string host);
  // Stops the dump thread.
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // A ring for the communicator called `name` of `size` ranks; owned here, so a dump after the
  // communicators are gone (an error unwinding the run) still has them. nullptr when off.
  FlightRing* open(const std::string& name, int size);
  // Once, before any open(): rings of `capacity` entries (0: stays off); dumps go to
  // dir/flight-rank<R>.json. From now on `dump_signal` (dump and keep running), SIGTERM and
  // SIGINT make the dump thread write one: the handlers only write the signal number to a pipe,
  // the thread does the rest.
  void arm(std::size_t capacity, const std::string& dir, int dump_signal);
  // Removes this rank's dump of an earlier run in dir (it would read as this run's), unless this
  // run has dumped already. Called once the run holds its directories (a run refused at a lock
  // leaves the earlier run's evidence alone).
  void clear_earlier_dump();
  // Every rank's host, in rank order (from the placement allgather), for the dump.
  void set_hosts(const std::vector<RankPlacement>& ranks);
  // The training step the next collectives belong to.
  void set_step(std::int64_t step) { step_.store(step, std::memory_order_relaxed); }
  std::int64_t step() const { return step_.load(std::memory_order_relaxed); }
  // Seconds since the recorder was made.
  double now() const;
  bool on() const { return capacity_ > 0; }
  // Writes the dump (temporary + rename, so a reader never sees half a file); returns its path,
  // or "" when off, not armed yet, or the write failed (reported on stderr). Never throws.
  std::string dump(const std::string& reason) noexcept;
  // The dump's JSON text.
  std::string to_json(const std::string& reason) const;

 private:
  void dump_loop();

  int rank_;
  int world_;
  std::string host_;
  std::vector<std::string> hosts_;  // [rank]; empty until set_hosts
  std::size_t capacity_ = 0;
  std::chrono::steady_clock::time_point origin_;
  std::atomic<std::int64_t> step_{-1};
  mutable std::mutex mu_;  // rings_ and dir_
  std::mutex dump_mu_;     // dumps one at a time
  bool dumped_ = false;    // a dump was written (under dump_mu_)
  std::vector<std::unique_ptr<FlightRing>> rings_;
  std::string dir_;
  int pipe_[2] = {-1, -1};  // signal handlers -> dump thread
  std::thread dumper_;
};

}  // namespace mnist_ddp
