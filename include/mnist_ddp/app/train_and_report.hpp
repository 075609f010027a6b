// train_and_report.hpp — the end of a run: --eval-only's evaluation, or training with its final
// report; a run stopped by a signal says how to continue and, with --requeue under Slurm, has the
// job requeued.
#pragma once

#include <cstdint>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/data/dataset.hpp"
#include "mnist_ddp/diagnostics/log.hpp"
#include "mnist_ddp/trace/trace_file.hpp"

namespace mnist_ddp {

class Trainer;

// Collectives (inside): the model every replica holds, evaluated on disjoint test shards and
// reported as the checkpoint of `step`. Returns the exit status.
int evaluate_only(Comm& control, Trainer& trainer, const DataSplit& data, std::int64_t step,
                  Logger& log);

// Collectives (inside): training to the end or to a stop signal, the timeline (trace: --trace,
// nullptr without), then the report: the final evaluation, or the checkpoint to continue from
// (and Slurm's requeue). Returns the exit status: 0, 0 once Slurm requeued the job, or 128 + the
// stop signal.
int train_and_report(Comm& control, const Config& cfg, Trainer& trainer, const DataSplit& data,
                     Logger& log, const TraceFile* trace);

}  // namespace mnist_ddp
