// trace_output.hpp — the timeline file (--trace): every rank's events gathered to rank 0 and
// written as one Chrome trace-event JSON (pid = rank, tid 0 = compute, tid 1 + b = communication
// of bucket b: trace_tid), which Perfetto (ui.perfetto.dev) and chrome://tracing open.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/diagnostics/trace.hpp"
#include "mnist_ddp/launch/placement.hpp"

namespace mnist_ddp {

// Collective (agreement): rank 0 checks that --trace's file can be created (its folder exists
// and is writable) before training starts; one clear error on every rank otherwise.
void check_trace_file(Comm& control, const std::string& path);

// One rank's events as a JSON array of Chrome trace events (metadata naming the process and its
// tracks included). host: for the process name; shift_us: added to every time (this rank's
// origin on the job's common timeline).
std::string trace_events_json(const std::vector<TraceEvent>& events, int rank,
                              const std::string& host, double shift_us = 0);

// What the file is made of: this rank's tracer, where it goes, every rank's placement (process
// names), and the file's "otherData" JSON object (window, configuration).
struct TraceFile {
  const Tracer& tracer;
  std::string path;
  std::vector<RankPlacement> ranks;
  std::string other_json;
};

// The file's "otherData": the window, the world size and the configuration.
std::string trace_other_data(const Config& cfg, const TraceWindow& window, int world_size);

// The run's file, once its first step is known: the window (--trace-steps, else the default
// after this run's warm-up: default_trace_window) is set on the tracer here.
TraceFile trace_file(Tracer& tracer, const Config& cfg, std::int64_t first_step,
                     std::int64_t total_steps, std::vector<RankPlacement> ranks, int world_size);

// Collective: every rank's events to rank 0, which writes the file (temporary file, then rename:
// a reader never sees half a trace).
void write_trace(Comm& control, const TraceFile& file);

}  // namespace mnist_ddp
