// agree.cpp — what all ranks agree on (agree.hpp): one all-reduce decides whether the job goes
// on; the stop signal; every rank's placement; any string from every rank.
#include "mnist_ddp/comm/agree.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/process/signals.hpp"

namespace mnist_ddp {

void run_agreed(Comm& comm, const std::function<void()>& fn) {
  std::string message;
  int code = 0;
  try {
    fn();
  } catch (const UserError& e) {
    message = e.what();
    code = e.exit_code();
  }
  // Collective: every rank contributes (first failing rank, exit code); MIN of the rank gives the
  // reporter, MAX of the code the exit status. {-code} so one MIN reduction carries both.
  std::int32_t v[2] = {code != 0 ? comm.rank() : comm.size(), -code};
  comm.allreduce(std::span<std::int32_t>(v, 2), ReduceOp::Min);
  if (v[0] == comm.size()) return;
  if (v[0] == comm.rank()) {
    std::fprintf(stderr, "mnist_ddp: error: %s\n", message.c_str());
    std::fflush(stderr);
  }
  throw AgreedExit{-v[1]};
}

std::string agree_first_failure(Comm& comm, const std::string& mine) {
  // Collective: the lowest failing rank (size() when none failed).
  std::int64_t first = mine.empty() ? comm.size() : comm.rank();
  comm.allreduce(std::span<std::int64_t>(&first, 1), ReduceOp::Min);
  if (first == comm.size()) return "";
  // Collective: that rank's message, NUL-padded into 32 words, so every rank can report it.
  std::array<std::uint64_t, 32> words{};
  if (first == comm.rank()) {
    std::memcpy(words.data(), mine.data(), std::min(mine.size(), words.size() * 8 - 1));
  }
  comm.broadcast(std::span<std::uint64_t>(words), static_cast<int>(first));
  return fmt::format("rank {}: {}", first, reinterpret_cast<const char*>(words.data()));
}

int agree_stop_signal(Comm& comm) {
  std::int32_t s = static_cast<std::int32_t>(stop_signal_received());
  // Collective: if any rank was signalled, every rank learns it at the same step boundary.
  comm.allreduce(std::span<std::int32_t>(&s, 1), ReduceOp::Max);
  return static_cast<int>(s);
}

std::vector<RankPlacement> gather_placements(Comm& comm, const RankPlacement& mine) {
  const std::vector<std::uint64_t> send = encode_placement(mine);
  std::vector<std::uint64_t> all(kPlacementWords * static_cast<std::size_t>(comm.size()));
  // Collective: one allgather gives every rank every rank's record (rank 0 prints the table;
  // every rank reaches the same verdict on the GPU check).
  comm.allgather(send, all);
  std::vector<RankPlacement> out;
  for (int r = 0; r < comm.size(); ++r)
    out.push_back(decode_placement(std::span<const std::uint64_t>(all).subspan(
        kPlacementWords * static_cast<std::size_t>(r), kPlacementWords)));
  return out;
}

std::vector<std::string> gather_strings(Comm& comm, const std::string& mine) {
  // Collective: the lengths first, then the bytes in 8-byte words padded to the longest.
  const auto n = static_cast<std::size_t>(comm.size());
  std::vector<std::uint64_t> lengths(n);
  const std::uint64_t my_length = mine.size();
  comm.allgather(std::span<const std::uint64_t>(&my_length, 1), lengths);
  const std::uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const std::size_t words = static_cast<std::size_t>((longest + 7) / 8);
  std::vector<std::uint64_t> send(words, 0), recv(words * n, 0);
  // (Every string empty: no words, and memcpy must not see their null data.)
  if (!mine.empty()) std::memcpy(send.data(), mine.data(), mine.size());
  // Collective: every rank's padded bytes.
  comm.allgather(std::span<const std::uint64_t>(send), recv);
  std::vector<std::string> out(n);
  for (std::size_t r = 0; r < n; ++r) {
    out[r].assign(reinterpret_cast<const char*>(recv.data() + r * words),
                  static_cast<std::size_t>(lengths[r]));
  }
  return out;
}

}  // namespace mnist_ddp
