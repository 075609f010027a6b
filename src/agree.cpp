// agree.cpp — run_agreed: one all-reduce decides whether the job goes on.
#include "mnist_ddp/agree.hpp"

#include <cstdint>
#include <cstdio>
#include <string>

#include "mnist_ddp/check.hpp"

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

}  // namespace mnist_ddp
