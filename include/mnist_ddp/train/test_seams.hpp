// test_seams.hpp — every failure and observation seam the tests drive, in one place: the flags
// --debug-hang-rank, --debug-exit-rank and --debug-desync-rank (a rank that stops answering, dies,
// or issues a collective its peers do not, before step 3), --debug-slow (a rank one of whose
// phases is slow) and --debug-sample-log (each rank's training indices, for the data-split
// check); and two environment variables: MNIST_DDP_TEST_RANKS_PER_NODE (post-local SGD's groups
// of K ranks on one machine) and MNIST_DDP_TEST_FAIL_CHECKPOINT=enospc (a checkpoint write that
// fails as on a full disk). Kept apart from the code they act in, so that code holds production
// logic only. (--debug-fail-capture acts inside the CUDA graph capture, ops/cuda/step_graph.cu.)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/train/step_phases.hpp"

namespace mnist_ddp {

// --debug-slow RANK:PHASE:MS: that rank sleeps MS milliseconds at the end of PHASE every step (a
// straggler whose slowness the all-reduce would otherwise spread over every rank).
struct DebugSlow {
  int rank = -1;
  Phase phase = Phase::Backward;
  double ms = 0;
};
std::optional<DebugSlow> parse_debug_slow(const std::string& text);
// The text parse_debug_slow reads back to s ("1:backward:200").
std::string debug_slow_text(const DebugSlow& s);

// The seams a run's flags set (all off by default).
struct SeamOptions {
  int hang_rank = -1;             // --debug-hang-rank
  int exit_rank = -1;             // --debug-exit-rank
  int desync_rank = -1;           // --debug-desync-rank
  std::optional<DebugSlow> slow;  // --debug-slow
  std::string sample_log;         // --debug-sample-log DIR ("": off)
  bool fail_capture = false;      // --debug-fail-capture
};

// Before training step `step`: where the seams name this rank (comm.rank()) and the step is 3,
// hangs forever, exits with status 1 (without MPI_Finalize), or issues one extra collective on
// comm; otherwise returns.
void debug_seams_before_step(const SeamOptions& seams, Comm& comm, std::int64_t step);
// At the end of phase p on this rank: the delay, where the seam names them.
void debug_slow_phase(const DebugSlow& slow, int rank, Phase p);

// --debug-sample-log DIR: the positions [first, last) of this epoch's order that this rank
// trained on, appended one index per line to DIR/samples-epoch<E>-rank<R>.txt (a resumed run
// continues the file of its epoch). UserError when it cannot be written.
void append_sample_log(const std::string& dir, std::int64_t epoch, int rank,
                       const std::vector<std::int64_t>& order, std::int64_t first,
                       std::int64_t last);

// MNIST_DDP_TEST_RANKS_PER_NODE=K: post-local SGD groups ranks K at a time as if they were nodes
// (nullopt when unset). UserError for anything but a positive number.
std::optional<int> ranks_per_node_seam();

// MNIST_DDP_TEST_FAIL_CHECKPOINT=enospc: the write of the temporary checkpoint `tmp` fails as a
// full disk would (where no small filesystem can be mounted for the test). Returns when unset;
// otherwise throws (UserError: the injected failure, or a value the seam does not know).
void checkpoint_write_seam(const std::string& tmp);

}  // namespace mnist_ddp
