// agree.hpp — what all ranks must agree on, each one small collective: user errors (a phase that
// can fail on some ranks, a bad flag or a file unreadable on one node, is followed by one small
// all-reduce, so every rank learns that the job must stop, exactly one rank prints the message,
// and nobody is left waiting in a collective), a stop signal received by any rank, and every
// rank's placement (and any rank's string).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/launch/placement.hpp"

namespace mnist_ddp {

// Thrown on every rank after a failed agreement; main() returns `code`.
struct AgreedExit {
  int code;
};

// Runs fn (which must not itself enter collectives that a failing rank could skip). If any rank
// threw UserError, the lowest such rank prints "mnist_ddp: error: <message>" once, and every rank
// throws AgreedExit with the largest exit code any rank reported.
void run_agreed(Comm& comm, const std::function<void()>& fn);

// Collective (host memory): every rank passes its own failure ("" for none). Returns "" on every
// rank when nobody failed, else the same "rank R: <R's message>" everywhere, R the lowest failing
// rank (the message is cut to 255 bytes). For recoverable failures every rank must handle alike
// (a CUDA graph capture that one rank could not make).
std::string agree_first_failure(Comm& comm, const std::string& mine);

// Collective, at a step boundary: the signal any rank received (signals.hpp; the largest number
// if several), 0 if none: every rank stops at the same step.
int agree_stop_signal(Comm& comm);

// Collective: every rank's placement record (one allgather), in rank order.
std::vector<RankPlacement> gather_placements(Comm& comm, const RankPlacement& mine);

// Collective: every rank's string, in rank order, on every rank (any lengths).
std::vector<std::string> gather_strings(Comm& comm, const std::string& mine);

}  // namespace mnist_ddp
