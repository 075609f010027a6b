// agree.cpp — run_agreed: one all-reduce decides whether the job goes on.
#include "mnist_ddp/runtime/agree.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "mnist_ddp/runtime/check.hpp"

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

}  // namespace mnist_ddp
