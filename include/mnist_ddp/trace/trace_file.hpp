// trace_file.hpp — the timeline file (--trace): every rank's events gathered to rank 0 and
// written as one Chrome trace-event JSON (pid = rank, tid 0 = compute, tid 1 + b = communication
// of bucket b: trace_tid), which Perfetto (ui.perfetto.dev) and chrome://tracing open. The
// collectives that gather it are handed in (TraceCollectives): the timeline sits below the
// communication layer, whose spans it records.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mnist_ddp/trace/trace.hpp"

namespace mnist_ddp {

// On rank 0 before training starts: --trace's file can be created (its folder exists and is
// writable); UserError naming the flag and the fix otherwise. The caller makes it an agreement
// (every rank learns of the failure).
void check_trace_path(const std::string& path);

// One rank's events as a JSON array of Chrome trace events (metadata naming the process and its
// tracks included). host: for the process name; shift_us: added to every time (this rank's
// origin on the job's common timeline).
std::string trace_events_json(const std::vector<TraceEvent>& events, int rank,
                              const std::string& host, double shift_us = 0);

// What the file is made of: this rank's tracer, where it goes, every rank's host (process
// names, in rank order), and the file's "otherData" JSON object (window, configuration).
struct TraceFile {
  const Tracer& tracer;
  std::string path;
  std::vector<std::string> hosts;
  std::string other_json;
};

// The file's "otherData": the window, the world size and the run's configuration (a JSON object).
std::string trace_other_data(const std::string& config_json, const TraceWindow& window,
                             int world_size);

// The run's file, once its first step is known. window_given: --trace-steps was given; otherwise
// the default window after this run's warm-up (default_trace_window) is set on the tracer here.
// hosts: every rank's, in rank order (the world size).
TraceFile trace_file(Tracer& tracer, std::string path, bool window_given, std::int64_t first_step,
                     std::int64_t total_steps, std::vector<std::string> hosts,
                     const std::string& config_json);

// The collectives writing the file takes, over the ranks of the run (host memory).
struct TraceCollectives {
  int rank = 0;
  // Every rank's value, in rank order, on every rank.
  std::function<std::vector<double>(double)> gather_doubles;
  std::function<std::vector<std::string>(const std::string&)> gather_strings;
  // Runs fn as an agreement: a UserError it throws on any rank stops every rank (comm/agree.hpp
  // run_agreed).
  std::function<void(const std::function<void()>&)> agreed;
};

// Collective: every rank's events to rank 0, which writes the file (temporary file, then rename:
// a reader never sees half a trace).
void write_trace(const TraceFile& file, const TraceCollectives& collectives);

}  // namespace mnist_ddp
