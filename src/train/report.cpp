// report.cpp — the trainer's log lines and JSONL records, one function per event.
#include "mnist_ddp/train/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "mnist_ddp/comm/compress.hpp"

namespace mnist_ddp {
namespace {

std::string fmt_bytes(double b) {
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  return fmt::format("{:.1f} kB", b / 1e3);
}

std::string fmt_eta(double s) {
  const auto t = static_cast<long>(std::max(0.0, s));
  return t >= 3600 ? fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60)
                   : fmt::format("{}m{:02}s", t / 60, t % 60);
}

}  // namespace

void add_totals(nlohmann::json& record, const RunTotals& t) {
  record["wall_s"] = t.wall_s;
  record["train_s"] = t.train_s;
  record["images_seen"] = t.images_seen;
}

void Reporter::progress(const StepPosition& at, double window_loss, double images_per_s,
                        double eta_s) {
  log_.progress(fmt::format("epoch {}/{} step {}/{} loss {:.4f} {:.0f} img/s ETA {}", at.epoch + 1,
                            schedule_.epochs, at.step, at.total_steps, window_loss, images_per_s,
                            fmt_eta(eta_s)));
}

void Reporter::train_window(const StepPosition& at, const WindowFigures& w) {
  std::string line = fmt::format("epoch {} step {}/{} loss {:.4f} lr {:.5g} {:.0f} img/s comm {}",
                                 at.epoch + 1, at.step, at.total_steps, w.loss, w.lr,
                                 w.images_per_s, fmt_bytes(static_cast<double>(w.comm_bytes)));
  if (w.amp) line += fmt::format(" loss-scale {:g} skipped {}", w.amp->scale, w.amp->skipped);
  if (log_.live_progress()) {
    log_.file(line);
  } else {
    log_.info(line);
  }
  nlohmann::json rec = {{"event", "train"},
                        {"step", at.step},
                        {"epoch", at.epoch + 1},
                        {"loss", w.loss},
                        {"lr", w.lr},
                        {"images_per_s", w.images_per_s},
                        {"comm_bytes", w.comm_bytes}};
  add_totals(rec, at.totals);
  log_.metrics(rec);
  if (w.amp) {
    log_.metrics({{"event", "amp"},
                  {"step", at.step},
                  {"loss_scale", w.amp->scale},
                  {"skipped_steps_total", w.amp->skipped_total}});
  }
}

void Reporter::eval(const StepPosition& at, const EvalResult& e) {
  log_.info(fmt::format("eval step {}: test loss {:.4f} top-1 {:.2f}% top-5 {:.2f}%", at.step,
                        e.loss, 100 * e.top1, 100 * e.top5));
  nlohmann::json rec = {{"event", "eval"},     {"step", at.step}, {"epoch", at.epoch + 1},
                        {"test_loss", e.loss}, {"top1", e.top1},  {"top5", e.top5},
                        {"count", e.count}};
  add_totals(rec, at.totals);
  log_.metrics(rec);
}

void Reporter::comm_epoch(const StepPosition& at, const CommFigures& c) {
  const ReducerStats& rs = c.stats;
  const double steps = static_cast<double>(std::max<std::int64_t>(rs.steps, 1));
  const std::string per_step = fmt_bytes(static_cast<double>(rs.payload_bytes) / steps);
  // --accumulate: the all-reduces one per micro-batch would have made, and did not.
  const double micro_per_step = static_cast<double>(c.micro_batches) / steps;
  const auto saved = static_cast<std::uint64_t>(
      static_cast<double>(rs.payload_bytes) / steps *
      static_cast<double>(std::max<std::int64_t>(c.micro_batches - rs.steps, 0)));
  const std::string accumulate =
      schedule_.accumulate > 1 ? fmt::format(", {:.3g} micro-batches per step: {} not all-reduced",
                                             micro_per_step, fmt_bytes(static_cast<double>(saved)))
                               : "";
  if (c.gpu) {
    // The GPU's all-reduces complete asynchronously: host clocks would time the enqueue.
    log_.info(fmt::format(
        "comm epoch {}: {} buckets{} on the {}, hook {}, {} per step handed to "
        "all-reduce, ~{} sent per rank{} (timing: asynchronous on the GPU, profile with nsys)",
        at.epoch + 1, c.buckets,
        !gradients_.overlap ? " (--no-overlap: one all-reduce after backward)"
                            : " (overlapped with backward)",
        c.transport, to_string(gradients_.compression), per_step,
        fmt_bytes(static_cast<double>(rs.wire_bytes)), accumulate));
  } else {
    log_.info(fmt::format(
        "comm epoch {}: {} buckets{}, hook {}, {} per step handed to all-reduce, "
        "~{} sent per rank{}, {:.1f} ms in flight, {:.1f} ms exposed (not hidden by "
        "backward)",
        at.epoch + 1, c.buckets, !gradients_.overlap ? " (--no-overlap: one all-reduce)" : "",
        to_string(gradients_.compression), per_step, fmt_bytes(static_cast<double>(rs.wire_bytes)),
        accumulate, 1e3 * rs.comm_seconds, 1e3 * rs.exposed_seconds));
  }
  log_.metrics({{"event", "comm"},
                {"epoch", at.epoch + 1},
                {"step", at.step},
                {"buckets", c.buckets},
                {"overlap", gradients_.overlap},
                {"wire_bytes", rs.wire_bytes},
                {"compression", to_string(gradients_.compression)},
                {"payload_bytes", rs.payload_bytes},
                {"steps", rs.steps},
                {"accumulate", schedule_.accumulate},
                {"micro_batches", c.micro_batches},
                {"saved_bytes", saved},
                {"comm_s", rs.comm_seconds},
                {"exposed_s", rs.exposed_seconds}});
}

void Reporter::step_phases(const StepPosition& at, std::size_t steps, const PhaseSeconds& m,
                           const std::string& timing) {
  if (steps == 0) return;
  const auto ms = [&](Phase p) { return 1e3 * m[static_cast<std::size_t>(p)]; };
  double sum = 0;
  for (const double s : m) sum += s;
  log_.info(fmt::format(
      "step time epoch {} (rank 0, per-phase medians over {} steps{}): {:.2f} ms = data {:.2f} + "
      "forward {:.2f} "
      "+ backward {:.2f} + exposed comm {:.2f} + optimizer {:.2f} ms",
      at.epoch + 1, steps, timing == "host clocks" ? "" : ", " + timing, 1e3 * sum, ms(Phase::Data),
      ms(Phase::Forward), ms(Phase::Backward), ms(Phase::Comm), ms(Phase::Optimizer)));
  nlohmann::json rec = {{"event", "step_time"}, {"epoch", at.epoch + 1}, {"step", at.step},
                        {"steps", steps},       {"timing", timing},      {"total_ms", 1e3 * sum}};
  for (const auto& [phase, name] : kPhaseNames) rec[std::string(name) + "_ms"] = ms(phase);
  log_.metrics(rec);
}

void Reporter::epoch(const StepPosition& at, bool done, const EvalResult& e, double images_per_s,
                     std::uint64_t comm_bytes) {
  log_.info(
      fmt::format("epoch {} {}: test loss {:.4f} top-1 {:.2f}% top-5 {:.2f}% ({} images) "
                  "| train {:.1f} s, {:.0f} img/s",
                  at.epoch + 1, done ? "done" : "stopped", e.loss, 100 * e.top1, 100 * e.top5,
                  e.count, at.totals.train_s, images_per_s));
  nlohmann::json rec = {{"event", "epoch"},        {"step", at.step},
                        {"epoch", at.epoch + 1},   {"test_loss", e.loss},
                        {"top1", e.top1},          {"top5", e.top5},
                        {"count", e.count},        {"images_per_s", images_per_s},
                        {"comm_bytes", comm_bytes}};
  add_totals(rec, at.totals);
  log_.metrics(rec);
}

void Reporter::best(const StepPosition& at, double top1, const std::string& path) {
  log_.info(fmt::format("best: test top-1 {:.2f}% at step {}, kept as {} (--keep-best)", 100 * top1,
                        at.step, path));
  nlohmann::json rec = {{"event", "best"},
                        {"step", at.step},
                        {"epoch", at.epoch + 1},
                        {"top1", top1},
                        {"path", path}};
  add_totals(rec, at.totals);
  log_.metrics(rec);
}

void Reporter::checkpoint(const StepPosition& at, const std::string& path, const char* why,
                          std::int64_t sample_offset, bool preemption) {
  log_.info(fmt::format("checkpoint ({}): {} (step {}; resumes at epoch {}, sample {} per rank)",
                        why, path, at.step, at.epoch + 1, sample_offset));
  nlohmann::json rec = {
      {"event", "checkpoint"},          {"step", at.step}, {"epoch", at.epoch + 1},
      {"sample_offset", sample_offset}, {"path", path},    {"reason", why},
      {"preemption", preemption}};
  add_totals(rec, at.totals);
  log_.metrics(rec);
}

void Reporter::stopping(const char* signal, std::int64_t step) {
  log_.info(fmt::format("{} received: stopping at step {} with a checkpoint", signal, step));
}

void Reporter::capture_fell_back(int batch, const std::string& why) {
  log_.warn(
      fmt::format("CUDA graphs: capture failed for batch size {} on {}; every rank runs steps of "
                  "that size eagerly from now on (correct, slower)",
                  batch, why));
}

void Reporter::graphs(int captured, std::int64_t replayed, std::int64_t runs) {
  if (schedule_.accumulate > 1) {
    log_.info(fmt::format(
        "CUDA graphs: {} captured (one per batch size and kind of micro-batch: first, middle, "
        "last), {} of {} micro-batches replayed",
        captured, replayed, runs));
    return;
  }
  log_.info(fmt::format("CUDA graphs: {} captured (one per batch size), {} of {} steps replayed",
                        captured, replayed, runs));
}

namespace {
// "0-3", "0,2,5": a node's ranks.
std::string rank_list(const std::vector<int>& r) {
  if (r.empty()) return "-";
  bool consecutive = true;
  for (std::size_t i = 1; i < r.size(); ++i) consecutive = consecutive && r[i] == r[i - 1] + 1;
  if (consecutive)
    return r.size() == 1 ? std::to_string(r[0]) : fmt::format("{}-{}", r[0], r.back());
  std::string out;
  for (const int x : r) {
    if (!out.empty()) out += ',';
    out += std::to_string(x);
  }
  return out;
}
}  // namespace

std::string straggler_line(std::int64_t step, const StragglerEvent& e,
                           const std::vector<RankPlacement>& ranks, double threshold) {
  const RankScore& s = e.score;
  const RankPlacement& p = ranks[static_cast<std::size_t>(s.rank)];
  if (ranks.size() == 1) {
    // A world of one: its own best window is the yardstick, and nobody waits for it.
    if (e.recovered) {
      return fmt::format(
          "straggler: rank {} (host {}) recovered at step {}: score {:.2f} (compute {:.2f} "
          "ms/step, its own best {:.2f})",
          s.rank, p.host, step, s.individual, e.compute_ms, e.compute_ms * s.individual);
    }
    return fmt::format(
        "straggler: rank {} (host {}, {}) is slower than its own best: score {:.2f} for {} "
        "windows below {:.2f} (compute {:.2f} ms/step against its own best {:.2f})",
        s.rank, p.host, p.device, s.individual, e.windows_below, threshold, e.compute_ms,
        e.compute_ms * s.individual);
  }
  if (e.recovered) {
    return fmt::format(
        "straggler: rank {} (host {}) recovered at step {}: score {:.2f} (compute {:.2f} ms/step "
        "against {:.2f} on rank {}, the fastest)",
        s.rank, p.host, step, s.relative, e.compute_ms, e.fastest_ms, e.fastest_rank);
  }
  return fmt::format(
      "straggler: rank {} (host {}, {}) is slow in {}: score {:.2f} for {} windows below {:.2f} "
      "(compute {:.2f} ms/step against {:.2f} on rank {}, the fastest; its own best {:.2f}); "
      "the other ranks wait {:.2f} ms/step for it, {:.0f}% of their step time",
      s.rank, p.host, p.device, name_in(kPhaseNames, s.slow_phase), s.relative, e.windows_below,
      threshold, e.compute_ms, e.fastest_ms, e.fastest_rank, e.compute_ms * s.individual,
      s.excess_ms, 100 * s.cost);
}

void Reporter::straggler(const StepPosition& at, const StragglerEvent& e,
                         const std::vector<RankPlacement>& ranks, double threshold) {
  const RankScore& s = e.score;
  const RankPlacement& p = ranks[static_cast<std::size_t>(s.rank)];
  // A world of one has no faster rank to lose a phase against: no phase.
  const std::string phase(ranks.size() > 1 ? name_in(kPhaseNames, s.slow_phase) : "");
  log_.info(straggler_line(at.step, e, ranks, threshold));
  log_.metrics({{"event", "straggler"},
                {"step", at.step},
                {"state", e.recovered ? "recovered" : "slow"},
                {"rank", s.rank},
                {"host", p.host},
                {"device", p.device},
                {"phase", phase},
                {"relative_score", s.relative},
                {"individual_score", s.individual},
                {"compute_ms", e.compute_ms},
                {"fastest_ms", e.fastest_ms},
                {"fastest_rank", e.fastest_rank},
                {"cost", s.cost}});
}

void Reporter::node_table(const std::vector<NodeRow>& rows, double threshold) {
  if (rows.empty()) return;
  if (std::none_of(rows.begin(), rows.end(), [](const NodeRow& r) { return r.measured; })) {
    // Not a table of zeros scored 1.00 (which reads as "every node healthy"): nothing was timed.
    log_.info(fmt::format("nodes: not measured (no window had {} timed steps on every rank)",
                          kMinStragglerWindowSteps));
    return;
  }
  std::string text = fmt::format(
      "nodes (compute per step over the run, waits for other ranks left out; score = the "
      "fastest node's / this one's, below {:.2f} is slow):\n  {:<16} {:>7} {:>16} {:>6}",
      threshold, "host", "ranks", "compute ms/step", "score");
  nlohmann::json nodes = nlohmann::json::array();
  for (const NodeRow& r : rows) {
    if (!r.measured) {
      // A node none of whose ranks was timed: no number, rather than a score of 1.
      text += fmt::format("\n  {:<16} {:>7} {:>16} {:>6}", r.host, rank_list(r.ranks), "-", "-");
      nodes.push_back({{"host", r.host},
                       {"ranks", r.ranks},
                       {"compute_ms", nullptr},
                       {"score", nullptr},
                       {"slow", false}});
      continue;
    }
    text += fmt::format("\n  {:<16} {:>7} {:>16.2f} {:>6.2f}{}", r.host, rank_list(r.ranks),
                        r.compute_ms, r.score, r.score < threshold ? "  SLOW" : "");
    nodes.push_back({{"host", r.host},
                     {"ranks", r.ranks},
                     {"compute_ms", r.compute_ms},
                     {"score", r.score},
                     {"slow", r.score < threshold}});
  }
  log_.info(text);
  log_.metrics({{"event", "nodes"}, {"threshold", threshold}, {"nodes", nodes}});
}

}  // namespace mnist_ddp
