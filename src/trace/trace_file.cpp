// trace_file.cpp — gathering the ranks' trace events and writing the Chrome trace file.
#include "mnist_ddp/trace/trace_file.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "mnist_ddp/base/version.hpp"
#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

std::string folder_of(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

nlohmann::json args_of(const TraceEvent& e) {
  nlohmann::json a = nlohmann::json::object();
  if (e.args.step >= 0) a["step"] = e.args.step;
  if (e.args.layer != nullptr) a["layer"] = e.args.layer;
  if (e.args.bucket >= 0) a["bucket"] = e.args.bucket;
  if (e.args.bytes >= 0) a["bytes"] = e.args.bytes;
  if (e.args.batch >= 0) a["batch"] = e.args.batch;
  if (!e.hook.empty()) a["hook"] = e.hook;
  return a;
}

}  // namespace

void check_trace_path(const std::string& path) {
  const std::string dir = folder_of(path);
  if (std::filesystem::is_directory(path)) {
    throw UserError(
        fmt::format("--trace {}: is a folder; give a file name (e.g. {}/trace.json)", path, path));
  }
  if (!std::filesystem::is_directory(dir)) {
    throw UserError(fmt::format(
        "--trace {}: folder {} does not exist; create it or write the trace elsewhere", path, dir));
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    throw UserError(
        fmt::format("--trace {}: folder {} is not writable ({}); write the trace "
                    "elsewhere",
                    path, dir, std::strerror(errno)));
  }
}

std::string trace_events_json(const std::vector<TraceEvent>& events, int rank,
                              const std::string& host, double shift_us) {
  nlohmann::json out = nlohmann::json::array();
  out.push_back({{"name", "process_name"},
                 {"ph", "M"},
                 {"pid", rank},
                 {"args", {{"name", fmt::format("rank {} ({})", rank, host)}}}});
  out.push_back({{"name", "process_sort_index"},
                 {"ph", "M"},
                 {"pid", rank},
                 {"args", {{"sort_index", rank}}}});
  // The tracks: compute, and the communication lanes this rank used (trace.hpp).
  std::set<int> tids{0};
  for (const TraceEvent& e : events) tids.insert(trace_tid(e.track, e.args.bucket));
  for (const int tid : tids) {
    std::string name = name_in(kTrackNames, Track::Compute);
    if (tid > 0) {
      name = tid - 1 == kArenaLane
                 ? fmt::format("{}: all gradients", name_in(kTrackNames, Track::Comm))
                 : fmt::format("{}: bucket {}", name_in(kTrackNames, Track::Comm), tid - 1);
    }
    out.push_back({{"name", "thread_name"},
                   {"ph", "M"},
                   {"pid", rank},
                   {"tid", tid},
                   {"args", {{"name", name}}}});
    out.push_back({{"name", "thread_sort_index"},
                   {"ph", "M"},
                   {"pid", rank},
                   {"tid", tid},
                   {"args", {{"sort_index", tid}}}});
  }
  for (const TraceEvent& e : events) {
    nlohmann::json j = {{"name", e.name},
                        {"cat", name_in(kTrackNames, e.track)},
                        {"pid", rank},
                        {"tid", trace_tid(e.track, e.args.bucket)},
                        {"ts", e.ts_us + shift_us},
                        {"args", args_of(e)}};
    if (e.dur_us >= 0) {
      j["ph"] = "X";
      j["dur"] = e.dur_us;
    } else {
      j["ph"] = "i";
      j["s"] = "p";  // an instant marks the whole rank
    }
    out.push_back(std::move(j));
  }
  return out.dump();
}

std::string trace_other_data(const std::string& config_json, const TraceWindow& window,
                             int world_size) {
  return nlohmann::json{{"program", "mnist_ddp"},
                        {"version", kVersion},
                        {"world_size", world_size},
                        {"trace_steps", fmt::format("{}:{}", window.first, window.last)},
                        {"time_unit",
                         "microseconds since the earliest rank started its timeline (ranks "
                         "aligned by their wall clocks)"},
                        {"config", nlohmann::json::parse(config_json)}}
      .dump();
}

TraceFile trace_file(Tracer& tracer, std::string path, bool window_given, std::int64_t first_step,
                     std::int64_t total_steps, std::vector<std::string> hosts,
                     const std::string& config_json) {
  if (!window_given) tracer.set_window(default_trace_window(first_step, total_steps));
  const int world_size = static_cast<int>(hosts.size());
  return TraceFile{tracer, std::move(path), std::move(hosts),
                   trace_other_data(config_json, tracer.window(), world_size)};
}

void write_trace(const TraceFile& file, const TraceCollectives& collectives) {
  const std::string& path = file.path;
  const int rank = collectives.rank;
  const std::string host = static_cast<std::size_t>(rank) < file.hosts.size()
                               ? file.hosts[static_cast<std::size_t>(rank)]
                               : "?";
  // Collective: every rank's wall-clock origin; the job's timeline starts at the earliest, and
  // each rank's times move by how much later its own clock started.
  const double mine = file.tracer.origin_unix_us();
  const std::vector<double> origins = collectives.gather_doubles(mine);
  const double shift = mine - *std::min_element(origins.begin(), origins.end());
  // Collective: the events of every rank reach rank 0 (all of them, to keep the Comm interface to
  // allgather; a trace window is small).
  const std::vector<std::string> all =
      collectives.gather_strings(trace_events_json(file.tracer.events(), rank, host, shift));
  // Collective (agreement): every rank learns whether rank 0 could write the file.
  collectives.agreed([&] {
    if (rank != 0) return;
    const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) {
      throw UserError(
          fmt::format("--trace {}: cannot create {}: {}", path, tmp, std::strerror(errno)));
    }
    // The ranks' arrays are spliced, not parsed again: {"traceEvents": [r0..., r1..., ...]}.
    bool ok = std::fputs("{\"traceEvents\":[", f) >= 0;
    bool first = true;
    for (const std::string& a : all) {
      if (a.size() <= 2) continue;  // "[]"
      ok = ok && (first || std::fputc(',', f) != EOF);
      ok = ok && std::fwrite(a.data() + 1, 1, a.size() - 2, f) == a.size() - 2;
      first = false;
    }
    ok = ok && std::fprintf(f, "],\"displayTimeUnit\":\"ms\",\"otherData\":%s}\n",
                            file.other_json.c_str()) > 0;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      std::remove(tmp.c_str());
      throw UserError(fmt::format("--trace {}: cannot write it: {}", path, std::strerror(err)));
    }
  });
}

}  // namespace mnist_ddp
