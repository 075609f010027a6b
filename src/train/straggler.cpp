// straggler.cpp — per-rank compute scores, straggler and recovery events, the per-node table
// (straggler.hpp).
#include "mnist_ddp/train/straggler.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <span>

namespace mnist_ddp {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (const double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double compute_of(const PhaseSeconds& p) {
  double s = 0;
  for (std::size_t i = 0; i < kPhases; ++i)
    if (static_cast<Phase>(i) != Phase::Comm) s += p[i];
  return s;
}

// Words per rank in the window's allgather: steps, compute, the phases, the step.
constexpr std::size_t kWindowWords = 3 + kPhases;

}  // namespace

std::vector<RankScore> score_window(const std::vector<RankWindow>& ranks,
                                    std::vector<double>& best_ms) {
  best_ms.resize(ranks.size(), 0);
  std::vector<RankScore> out;
  int fastest = -1;
  std::vector<double> steps_ms;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].steps <= 0 || ranks[r].compute_ms <= 0) continue;
    if (fastest < 0 || ranks[r].compute_ms < ranks[static_cast<std::size_t>(fastest)].compute_ms)
      fastest = static_cast<int>(r);
    steps_ms.push_back(ranks[r].step_ms);
  }
  if (fastest < 0) return out;
  const RankWindow& f = ranks[static_cast<std::size_t>(fastest)];
  // The job's step is the slowest rank's (the others wait for it, partly outside the timed phases:
  // the per-step agreement).
  const double step_ms = std::max(*std::max_element(steps_ms.begin(), steps_ms.end()), 1e-9);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const RankWindow& w = ranks[r];
    if (w.steps <= 0 || w.compute_ms <= 0) continue;
    RankScore s;
    s.rank = static_cast<int>(r);
    s.relative = f.compute_ms / w.compute_ms;
    if (best_ms[r] <= 0 || w.compute_ms < best_ms[r]) best_ms[r] = w.compute_ms;
    s.individual = best_ms[r] / w.compute_ms;
    // The phase where it loses most time against the fastest rank (Comm is waiting, not work).
    double worst = -1;
    for (std::size_t i = 0; i < kPhases; ++i) {
      if (static_cast<Phase>(i) == Phase::Comm) continue;
      const double d = w.phase_ms[i] - f.phase_ms[i];
      if (d > worst) {
        worst = d;
        s.slow_phase = static_cast<Phase>(i);
      }
    }
    s.excess_ms = w.compute_ms - f.compute_ms;
    // The others reach the all-reduce excess_ms before it and wait: that share of the step.
    s.cost = std::clamp(s.excess_ms / step_ms, 0.0, 1.0);
    out.push_back(s);
  }
  return out;
}

StragglerMonitor::StragglerMonitor(double threshold, std::vector<RankPlacement> ranks)
    : threshold_(threshold),
      ranks_(std::move(ranks)),
      best_ms_(ranks_.size(), 0),
      below_(ranks_.size(), 0),
      above_(ranks_.size(), 0),
      flagged_(ranks_.size(), false),
      window_ms_(ranks_.size()) {}

void StragglerMonitor::add(const PhaseSeconds& step) {
  if (compute_of(step) > 0) steps_.push_back(step);
}

std::vector<StragglerEvent> StragglerMonitor::end_window(Comm& control) {
  // This rank's means per step, in milliseconds: means, not medians, because a rank stalled now
  // and then (a noisy neighbour, a process stopped from outside) may be fast on most of its steps
  // and still hold every other rank up by its total.
  std::vector<double> mine(kWindowWords, 0);
  mine[0] = static_cast<double>(steps_.size());
  std::vector<double> v;
  for (const auto& s : steps_) v.push_back(1e3 * compute_of(s));
  mine[1] = mean(v);
  for (std::size_t i = 0; i < kPhases; ++i) {
    v.clear();
    for (const auto& s : steps_) v.push_back(1e3 * s[i]);
    mine[2 + i] = mean(v);
  }
  v.clear();
  for (const auto& s : steps_)
    v.push_back(1e3 * (compute_of(s) + s[static_cast<std::size_t>(Phase::Comm)]));
  mine[2 + kPhases] = mean(v);
  // Collective: one record per rank per window (never per step), the same scores on every rank.
  const std::size_t world = ranks_.size();
  std::vector<double> all(kWindowWords * world);
  control.allgather(std::span<const double>(mine), std::span<double>(all));
  // A window with fewer than kMinStragglerWindowSteps timed steps on some rank is not scored: it
  // goes on (every rank sees the same counts, so all carry it). The GPU times one step in 50, and a
  // one-sample window flagged a healthy single-GPU run (first GPU run: "score 0.57").
  for (std::size_t r = 0; r < world; ++r) {
    const double n = all[r * kWindowWords];
    if (n > 0 && n < kMinStragglerWindowSteps) return {};
  }
  steps_.clear();
  std::vector<RankWindow> windows(world);
  for (std::size_t r = 0; r < world; ++r) {
    const double* w = all.data() + r * kWindowWords;
    windows[r].steps = w[0];
    windows[r].compute_ms = w[1];
    for (std::size_t i = 0; i < kPhases; ++i) windows[r].phase_ms[i] = w[2 + i];
    windows[r].step_ms = w[2 + kPhases];
    if (w[0] > 0) window_ms_[r].push_back(w[1]);
  }
  const std::vector<RankScore> scores = score_window(windows, best_ms_);
  std::vector<StragglerEvent> events;
  if (scores.empty()) return events;
  int fastest = scores.front().rank;
  for (const auto& s : scores)
    if (s.relative >= 1.0 - 1e-12) fastest = s.rank;
  for (const RankScore& s : scores) {
    const auto r = static_cast<std::size_t>(s.rank);
    // With several ranks the others are the yardstick; a world of one has only its own past.
    const double score = world > 1 ? s.relative : s.individual;
    below_[r] = score < threshold_ ? below_[r] + 1 : 0;
    above_[r] = score < threshold_ ? 0 : above_[r] + 1;
    StragglerEvent e;
    e.score = s;
    e.compute_ms = windows[r].compute_ms;
    e.fastest_ms = windows[static_cast<std::size_t>(fastest)].compute_ms;
    e.fastest_rank = fastest;
    e.windows_below = below_[r];
    if (!flagged_[r] && below_[r] >= 2) {
      flagged_[r] = true;
      events.push_back(e);
    } else if (flagged_[r] && above_[r] >= 2) {
      flagged_[r] = false;
      e.recovered = true;
      events.push_back(e);
    }
  }
  return events;
}

std::vector<NodeRow> StragglerMonitor::node_table() const {
  std::map<std::string, NodeRow> by_host;
  std::map<std::string, std::vector<double>> medians;
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    NodeRow& row = by_host[ranks_[r].host];
    row.host = ranks_[r].host;
    row.ranks.push_back(static_cast<int>(r));
    if (!window_ms_[r].empty()) medians[row.host].push_back(median(window_ms_[r]));
  }
  std::vector<NodeRow> rows;
  double fastest = 0;
  for (auto& [host, row] : by_host) {
    row.compute_ms = median(medians[host]);
    row.measured = row.compute_ms > 0;
    if (row.compute_ms > 0 && (fastest <= 0 || row.compute_ms < fastest)) fastest = row.compute_ms;
    rows.push_back(row);
  }
  bool any_below = false;
  for (auto& row : rows) {
    row.score = row.compute_ms > 0 ? fastest / row.compute_ms : 1;
    any_below = any_below || row.score < threshold_;
  }
  if (any_below) {
    std::stable_sort(rows.begin(), rows.end(),
                     [](const NodeRow& a, const NodeRow& b) { return a.score < b.score; });
  }
  return rows;
}

}  // namespace mnist_ddp
