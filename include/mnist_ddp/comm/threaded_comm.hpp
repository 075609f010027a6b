// threaded_comm.hpp — the communication-thread overlap engine (--overlap-engine thread) as a Comm:
// the bucket all-reduces started on it run, one after the other, as blocking collectives on a
// thread of their own over their own communicator, so MPI progresses them while backward computes
// without MPI_Test calls from the compute thread (needs MPI_THREAD_MULTIPLE).
#pragma once

#include <memory>

#include "mnist_ddp/comm/comm.hpp"

namespace mnist_ddp {

// Wraps `inner` (used only by the thread from now on; watch it before wrapping). Carries the
// non-blocking f32 and 16-bit sums (start_allreduce_sum / test / wait / finish_allreduce_avg);
// any other collective on it is an internal error.
std::unique_ptr<Comm> make_threaded_comm(std::unique_ptr<Comm> inner);

}  // namespace mnist_ddp
