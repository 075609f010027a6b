// straggler.hpp — which rank (and node) is slow. A data-parallel step runs at the speed of its
// slowest rank, and the all-reduce hides who that is: every rank's step takes as long as the
// slowest one's. What it cannot hide is each rank's compute time, the step minus the time spent
// waiting for the others inside collectives (the step-phase split without its Comm phase:
// step_phases.hpp). Every window of steps the ranks gather one small record each (mean compute
// per step and per phase, one allgather: no collective per step) and score every rank, as
// NVIDIA's resiliency extension does: relative = the fastest rank's compute / this rank's,
// individual = this rank's best window / its current one. A rank whose score stays below the
// threshold for two windows in a row is a straggler (relative with several ranks; individual for
// a world of one, which has nobody to be compared with); a straggler whose score is back at the
// threshold for two windows in a row has recovered (two, so a score hovering at the threshold
// does not flap). A window is scored once every rank has timed at least 5 steps (the GPU times one
// step in 50; until then the window goes on). At the end, a table per node.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/launch/placement.hpp"
#include "mnist_ddp/train/step_phases.hpp"

namespace mnist_ddp {

// One rank's window: means over its steps (milliseconds).
struct RankWindow {
  double steps = 0;  // steps timed in the window (0: none: this rank is not scored)
  double compute_ms = 0;
  PhaseSeconds phase_ms{};  // indexed by Phase; Comm is the time spent waiting
  double step_ms = 0;       // compute + comm
};

// A rank's score in one window.
struct RankScore {
  int rank = 0;
  double relative = 1;                 // the fastest rank's compute / this rank's
  double individual = 1;               // this rank's best window / this one
  Phase slow_phase = Phase::Backward;  // where it loses most against the fastest rank
  double excess_ms = 0;                // its compute minus the fastest rank's, per step
  double cost = 0;                     // the share of the others' step time spent waiting for it
};

// The scores of one window (pure: unit-tested). best_ms[r]: rank r's best window so far, updated
// here. Ranks without timed steps get no score.
std::vector<RankScore> score_window(const std::vector<RankWindow>& ranks,
                                    std::vector<double>& best_ms);

// What a window changed: a rank that became a straggler (two windows below the threshold) or
// recovered from being one.
struct StragglerEvent {
  bool recovered = false;
  RankScore score;
  double compute_ms = 0;
  double fastest_ms = 0;
  int fastest_rank = 0;
  int windows_below = 0;
};

// Timed steps every rank needs before a window is scored (fewer: the window is carried on).
inline constexpr int kMinStragglerWindowSteps = 5;

// The end-of-run row of one node: its ranks, their compute per step (the median over its ranks
// of each rank's median window), its score (the fastest node's / this one's).
struct NodeRow {
  std::string host;
  std::vector<int> ranks;
  double compute_ms = 0;
  double score = 1;
  bool measured = false;  // no rank of it had a scored window: compute_ms and score mean nothing
};

class StragglerMonitor {
 public:
  // ranks: every rank's placement (host, device), in rank order.
  StragglerMonitor(double threshold, std::vector<RankPlacement> ranks);
  // One step's phases, this rank's, no communication. A step with no time in it is ignored.
  void add(const PhaseSeconds& step);
  // Collective (one allgather of a few floats): every rank's window, scored; the events of this
  // window (the same on every rank). Clears the window.
  std::vector<StragglerEvent> end_window(Comm& control);
  // The per-node table over the whole run (each rank's median window), slowest node first when
  // any node is below the threshold, else in host order.
  std::vector<NodeRow> node_table() const;
  const std::vector<RankPlacement>& ranks() const { return ranks_; }
  double threshold() const { return threshold_; }

 private:
  double threshold_;
  std::vector<RankPlacement> ranks_;
  std::vector<PhaseSeconds> steps_;             // this window's steps, this rank
  std::vector<double> best_ms_;                 // per rank
  std::vector<int> below_;                      // consecutive windows below, per rank
  std::vector<int> above_;                      // consecutive windows at or above, per rank
  std::vector<bool> flagged_;                   // warned and not recovered, per rank
  std::vector<std::vector<double>> window_ms_;  // per rank: each window's mean compute
};

}  // namespace mnist_ddp
