// comm.cpp — the typed front of Comm (dtype dispatch, byte accounting, averaging).
#include "mnist_ddp/comm/comm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/process/watchdog.hpp"

namespace mnist_ddp {

void Comm::allreduce(std::span<float> d, ReduceOp op) {
  count_bytes(d.size_bytes());
  const auto seq = watch_begin("allreduce", d.size(), DType::F32);
  allreduce_raw(d.data(), d.size(), DType::F32, op);
  watch_end(seq);
}
void Comm::allreduce(std::span<double> d, ReduceOp op) {
  count_bytes(d.size_bytes());
  const auto seq = watch_begin("allreduce", d.size(), DType::F64);
  allreduce_raw(d.data(), d.size(), DType::F64, op);
  watch_end(seq);
}
void Comm::allreduce(std::span<std::int32_t> d, ReduceOp op) {
  count_bytes(d.size_bytes());
  const auto seq = watch_begin("allreduce", d.size(), DType::I32);
  allreduce_raw(d.data(), d.size(), DType::I32, op);
  watch_end(seq);
}
void Comm::allreduce(std::span<std::int64_t> d, ReduceOp op) {
  count_bytes(d.size_bytes());
  const auto seq = watch_begin("allreduce", d.size(), DType::I64);
  allreduce_raw(d.data(), d.size(), DType::I64, op);
  watch_end(seq);
}
void Comm::allreduce_avg(std::span<float> d) {
  allreduce(d, ReduceOp::Sum);
  // Divide (not multiply by 1/size) so the result matches "sum, then divide" bit for bit.
  const float n = static_cast<float>(size());
  for (float& x : d) x /= n;
}
int Comm::start_allreduce_sum(std::span<float> d) {
  count_bytes(d.size_bytes());
  return start_allreduce_raw(d.data(), d.size(), DType::F32);
}
int Comm::start_allreduce_sum(std::span<std::uint16_t> d, DType type) {
  MNIST_DDP_CHECK(is_half(type), "a 16-bit all-reduce takes F16 or BF16");
  count_bytes(d.size_bytes());
  return start_allreduce_raw(d.data(), d.size(), type);
}
int Comm::start_allreduce_raw(void* data, std::size_t count, DType type) {
  const auto seq = watch_begin("allreduce", count, type);
  allreduce_raw(data, count, type, ReduceOp::Sum);
  watch_end(seq);
  return -1;
}
bool Comm::test(int) {
  return true;
}
void Comm::wait(int) {}
void Comm::finish_allreduce_avg(int request, std::span<float> data) {
  wait(request);
  // Sum, then divide (bit-identical to allreduce_avg on the whole arena).
  const float n = static_cast<float>(size());
  for (float& x : data) x /= n;
}
void Comm::bind_stream(void*) {}

namespace {
// A collective's fingerprint: sequence number, count, op name (16 bytes), dtype name (8 bytes).
constexpr std::size_t kFingerprint = 5;
void pack_name(const char* name, std::uint64_t* words, std::size_t n) {
  std::memset(words, 0, n * 8);
  std::memcpy(words, name, std::min(std::strlen(name), n * 8));
}
std::string unpack_name(const std::uint64_t* words, std::size_t n) {
  std::string s(reinterpret_cast<const char*>(words), n * 8);
  return s.substr(0, s.find('\0'));
}
std::string describe(const std::uint64_t* fp) {
  return fmt::format("#{} {} {} x {}", fp[0], unpack_name(fp + 2, 2), fp[1],
                     unpack_name(fp + 4, 1));
}
}  // namespace

std::uint64_t Comm::watch_begin(const char* op, std::size_t count, DType type) {
  const char* tn = name_in(kDTypeNames, type);
  const std::uint64_t seq = ++collectives_;
  // Recorded before the fingerprint check, so a dump after a desync shows what this rank issued.
  if (flight_ != nullptr) flight_->begin(seq, op, count, type);
  if (debug_collectives_ && size() > 1) {
    std::uint64_t mine[kFingerprint] = {seq, count, 0, 0, 0};
    pack_name(op, mine + 2, 2);
    pack_name(tn, mine + 4, 1);
    std::vector<std::uint64_t> all(kFingerprint * static_cast<std::size_t>(size()));
    // Collective (the check itself: the same 5 x u64 on every rank, whatever they disagree on).
    fingerprint_allgather(mine, all.data());
    for (int r = 1; r < size(); ++r) {
      const std::uint64_t* expected = all.data();
      const std::uint64_t* actual = all.data() + kFingerprint * static_cast<std::size_t>(r);
      if (std::equal(expected, expected + kFingerprint, actual)) continue;
      throw UserError(fmt::format(
          "--debug-collectives: the ranks disagree on their next collective: rank 0 (expected) "
          "issues {}, rank {} (actual) issues {}. A rank took another code path: look for a "
          "branch on rank-local state before this point",
          describe(expected), r, describe(actual)));
    }
  }
  if (watchdog_ != nullptr) {
    const std::uint64_t w = watchdog_->begin(
        fmt::format("{} {} x {} on a {}-rank communicator", op, count, tn, size()));
    open_watches_.push_back(OpenWatch{seq, w});
  }
  return seq;
}

void Comm::watch_end(std::uint64_t seq) {
  if (seq == 0) return;  // already ended (a request completed in test(), then waited)
  if (flight_ != nullptr) flight_->end(seq, done_state());
  if (watchdog_ == nullptr) return;
  const auto it = std::find_if(open_watches_.begin(), open_watches_.end(),
                               [&](const OpenWatch& w) { return w.seq == seq; });
  if (it == open_watches_.end()) return;
  watchdog_->end(it->watchdog);
  open_watches_.erase(it);
}

void Comm::rewind(const Mark& m) {
  payload_bytes_ = m.payload_bytes;
  collectives_ = m.collectives;
  if (flight_ != nullptr) flight_->forget_after(m.collectives);
  // What was registered after the mark never ran (a capture that failed): nothing to wait for.
  for (const OpenWatch& w : open_watches_) watchdog_->end(w.watchdog);
  open_watches_.clear();
  rewind_step();
}

void Comm::fingerprint_allgather(const std::uint64_t* send, std::uint64_t* recv) {
  allgather_raw(send, recv, kFingerprint, DType::U64);
}
bool Comm::capturable() const {
  return false;
}
bool Comm::device_memory() const {
  return false;
}
const char* Comm::transport() const {
  return "MPI";
}

void* Comm::collective_stream() const {
  return nullptr;
}

void Comm::broadcast(std::span<float> d, int root) {
  count_bytes(d.size_bytes());
  const auto seq = watch_begin("broadcast", d.size(), DType::F32);
  broadcast_raw(d.data(), d.size(), DType::F32, root);
  watch_end(seq);
}
void Comm::broadcast(std::span<std::int64_t> d, int root) {
  count_bytes(d.size_bytes());
  const auto seq = watch_begin("broadcast", d.size(), DType::I64);
  broadcast_raw(d.data(), d.size(), DType::I64, root);
  watch_end(seq);
}
void Comm::broadcast(std::span<std::uint64_t> d, int root) {
  count_bytes(d.size_bytes());
  const auto seq = watch_begin("broadcast", d.size(), DType::U64);
  broadcast_raw(d.data(), d.size(), DType::U64, root);
  watch_end(seq);
}
void Comm::allgather(std::span<const std::uint64_t> send, std::span<std::uint64_t> recv) {
  count_bytes(send.size_bytes());
  const auto seq = watch_begin("allgather", send.size(), DType::U64);
  allgather_raw(send.data(), recv.data(), send.size(), DType::U64);
  watch_end(seq);
}
void Comm::allgather(std::span<const float> send, std::span<float> recv) {
  count_bytes(send.size_bytes());
  const auto seq = watch_begin("allgather", send.size(), DType::F32);
  allgather_raw(send.data(), recv.data(), send.size(), DType::F32);
  watch_end(seq);
}
void Comm::allgather(std::span<const double> send, std::span<double> recv) {
  count_bytes(send.size_bytes());
  const auto seq = watch_begin("allgather", send.size(), DType::F64);
  allgather_raw(send.data(), recv.data(), send.size(), DType::F64);
  watch_end(seq);
}

}  // namespace mnist_ddp
