// agree.hpp — collective agreement on user errors: a phase that can fail on some ranks (bad flag,
// unreadable file on one node) is followed by one small all-reduce, so every rank learns that the
// job must stop, exactly one rank prints the message, and nobody is left waiting in a collective.
#pragma once

#include <functional>
#include <string>

#include "mnist_ddp/dist/comm.hpp"

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

}  // namespace mnist_ddp
