// flight_recorder.cpp — the per-communicator rings, the dump file and the dump thread.
#include "mnist_ddp/comm/flight_recorder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/process/signals.hpp"

namespace mnist_ddp {

FlightRing::FlightRing(const FlightRecorder& owner, std::string name, int size,
                       std::size_t capacity)
    : owner_(owner), name_(std::move(name)), size_(size), ring_(capacity) {}

void FlightRing::begin(std::uint64_t seq, const char* op, std::size_t count, DType type) {
  FlightEntry e;
  e.seq = seq;
  e.op = op;
  e.type = type;
  e.count = count;
  e.step = owner_.step();
  e.started_s = owner_.now();
  std::lock_guard<std::mutex> lock(mu_);
  ring_[seq % ring_.size()] = e;
  if (seq > newest_) newest_ = seq;
}

void FlightRing::end(std::uint64_t seq, FlightState state) {
  const double t = owner_.now();
  std::lock_guard<std::mutex> lock(mu_);
  FlightEntry& e = ring_[seq % ring_.size()];
  if (e.seq != seq) return;  // overwritten by N newer ones meanwhile
  e.state = state;
  e.ended_s = t;
}

void FlightRing::forget_after(std::uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  for (FlightEntry& e : ring_)
    if (e.seq > seq) e = FlightEntry{};
  if (newest_ > seq) newest_ = seq;
}

std::vector<FlightEntry> FlightRing::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FlightEntry> out;
  const std::uint64_t n = ring_.size();
  const std::uint64_t first = newest_ >= n ? newest_ - n + 1 : 1;
  for (std::uint64_t s = first; s <= newest_; ++s) {
    const FlightEntry& e = ring_[s % n];
    if (e.seq == s) out.push_back(e);
  }
  return out;
}

FlightRecorder::FlightRecorder(int rank, int world, std::string host)
    : rank_(rank),
      world_(world),
      host_(std::move(host)),
      origin_(std::chrono::steady_clock::now()) {}

FlightRecorder::~FlightRecorder() {
  if (!dumper_.joinable()) return;
  set_fatal_hook(nullptr, nullptr);
  set_flight_dump_pipe(-1);  // no handler writes to the pipe from here on
  const char stop = 0;
  // Wakes the dump thread with "stop" (0 is no signal number).
  if (write(pipe_[1], &stop, 1) != 1) std::perror("mnist_ddp: flight recorder pipe");
  dumper_.join();
  // The pipe stays open until the process ends: a handler on another thread may have read the
  // fd just before it was cleared and still write to it (closed, that write could hit a reused
  // fd or raise SIGPIPE). One recorder per process: two fds.
}

FlightRing* FlightRecorder::open(const std::string& name, int size) {
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ == 0) return nullptr;
  rings_.push_back(std::make_unique<FlightRing>(*this, name, size, capacity_));
  return rings_.back().get();
}

void FlightRecorder::set_hosts(const std::vector<RankPlacement>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  hosts_.clear();
  for (const RankPlacement& r : ranks) hosts_.push_back(r.host);
}

double FlightRecorder::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
}

void FlightRecorder::arm(std::size_t capacity, const std::string& dir, int dump_signal) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    MNIST_DDP_CHECK(rings_.empty() && capacity_ == 0, "the flight recorder is armed once");
    capacity_ = capacity;
    dir_ = dir;
  }
  // The dump signal never kills the rank, even with the recorder off: without a pipe its
  // handler does nothing.
  install_dump_handler(dump_signal);
  if (capacity == 0) return;
  // Non-blocking write end: a handler never blocks on a full pipe (a lost byte is a lost
  // duplicate request: the thread is dumping already).
  if (pipe2(pipe_, O_CLOEXEC) != 0 || fcntl(pipe_[1], F_SETFL, O_NONBLOCK) != 0) {
    std::perror("mnist_ddp: flight recorder pipe (the dump signal stays off)");
    return;
  }
  dumper_ = std::thread([this] { dump_loop(); });
  set_flight_dump_pipe(pipe_[1]);
  // A fatal library or internal error dumps too, before it aborts the job.
  set_fatal_hook(
      [](const std::string& why, void* self) { static_cast<FlightRecorder*>(self)->dump(why); },
      this);
}

void FlightRecorder::clear_earlier_dump() {
  std::lock_guard<std::mutex> one_at_a_time(dump_mu_);
  if (capacity_ == 0 || dumped_) return;
  std::string dir;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dir = dir_;
  }
  const std::string mine = dir + "/flight-rank" + std::to_string(rank_) + ".json";
  std::error_code ignored;
  std::filesystem::remove(mine, ignored);
  std::filesystem::remove(mine + ".tmp", ignored);
}

void FlightRecorder::dump_loop() {
  for (;;) {
    unsigned char signo = 0;
    const ssize_t n = read(pipe_[0], &signo, 1);
    if (n < 0) continue;  // EINTR
    if (n == 0 || signo == 0) return;
    dump(std::string(signal_name(signo)) + " received");
  }
}

std::string FlightRecorder::to_json(const std::string& reason) const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json comms = nlohmann::json::array();
  for (const auto& ring : rings_) {
    nlohmann::json entries = nlohmann::json::array();
    for (const FlightEntry& e : ring->snapshot()) {
      entries.push_back({{"seq", e.seq},
                         {"op", e.op},
                         {"dtype", name_in(kDTypeNames, e.type)},
                         {"count", e.count},
                         {"bytes", e.count * dtype_size(e.type)},
                         {"step", e.step},
                         {"state", name_in(kFlightStateNames, e.state)},
                         {"started_s", e.started_s},
                         {"ended_s", e.ended_s}});
    }
    comms.push_back({{"name", ring->name()}, {"size", ring->size()}, {"entries", entries}});
  }
  nlohmann::json doc = {{"format", "mnist_ddp flight recorder 1"},
                        {"rank", rank_},
                        {"world", world_},
                        {"host", host_},
                        {"hosts", hosts_},
                        {"pid", static_cast<long>(getpid())},
                        {"reason", reason},
                        {"step", step()},
                        {"now_s", now()},
                        {"capacity", capacity_},
                        {"communicators", comms}};
  return doc.dump(1);
}

std::string FlightRecorder::dump(const std::string& reason) noexcept {
  if (capacity_ == 0) return "";
  try {
    // One dump at a time (the watchdog's, the dump thread's and an error's may coincide).
    std::lock_guard<std::mutex> one_at_a_time(dump_mu_);
    std::string dir;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dir = dir_;
    }
    if (dir.empty()) return "";
    std::filesystem::create_directories(dir);
    const std::string path = dir + "/flight-rank" + std::to_string(rank_) + ".json";
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << to_json(reason) << '\n';
      out.close();
      if (!out) throw std::runtime_error("cannot write " + tmp);
    }
    std::filesystem::rename(tmp, path);
    dumped_ = true;
    std::fprintf(stderr, "mnist_ddp: rank %d: flight recorder dumped to %s (%s)\n", rank_,
                 path.c_str(), reason.c_str());
    return path;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist_ddp: rank %d: flight recorder dump failed: %s\n", rank_, e.what());
    return "";
  }
}

}  // namespace mnist_ddp
