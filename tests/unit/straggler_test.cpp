// straggler_test.cpp — the straggler scores (score_window): relative to the fastest rank and to
// the rank's own best window, the slow phase, the cost to the other ranks; and the --debug-slow
// seam's parser; the warning line, with several ranks and in a world of one.
#include <gtest/gtest.h>

#include <vector>

#include "mnist_ddp/train/report.hpp"
#include "mnist_ddp/train/straggler.hpp"
#include "mnist_ddp/train/test_seams.hpp"

namespace mnist_ddp {
namespace {

// A rank's window: data, forward, backward, comm (waiting), optimizer, in ms.
RankWindow window(double data, double forward, double backward, double comm, double optimizer) {
  RankWindow w;
  w.steps = 10;
  w.phase_ms = {data, forward, backward, comm, optimizer};
  w.compute_ms = data + forward + backward + optimizer;
  w.step_ms = w.compute_ms + comm;
  return w;
}

// Rank 2's backward takes 20 ms longer: the others wait 20 ms for it in the all-reduce, which
// makes every rank's step equal; compute is what tells them apart.
TEST(StragglerScore, NamesTheSlowRankAndPhaseThatTheAllReduceHides) {
  const std::vector<RankWindow> w = {window(1, 5, 10, 21, 1), window(1, 5, 10, 21, 1),
                                     window(1, 5, 30, 1, 1), window(1, 5, 10, 21, 1)};
  for (const auto& r : w) EXPECT_DOUBLE_EQ(r.step_ms, 38);  // the all-reduce evens out the steps
  std::vector<double> best;
  const auto s = score_window(w, best);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_DOUBLE_EQ(s[0].relative, 1);
  EXPECT_DOUBLE_EQ(s[2].relative, 17.0 / 37.0);
  EXPECT_EQ(s[2].slow_phase, Phase::Backward);
  EXPECT_DOUBLE_EQ(s[2].excess_ms, 20);
  EXPECT_NEAR(s[2].cost, 20.0 / 38.0, 1e-12);  // of the slowest rank's step: the job's
  EXPECT_DOUBLE_EQ(s[1].cost, 0);
  EXPECT_EQ(best, (std::vector<double>{17, 17, 37, 17}));
}

TEST(StragglerScore, SlowDataIsNamedDataAndTheIndividualScoreFollowsTheRanksOwnBest) {
  std::vector<double> best;
  score_window({window(1, 5, 10, 5, 1), window(1, 5, 10, 5, 1)}, best);
  // Window 2: rank 1's data loading is 17 ms slower: half its own best speed.
  const auto s = score_window({window(1, 5, 10, 18, 1), window(18, 5, 10, 1, 1)}, best);
  EXPECT_EQ(s[1].slow_phase, Phase::Data);
  EXPECT_DOUBLE_EQ(s[1].relative, 0.5);
  EXPECT_DOUBLE_EQ(s[1].individual, 0.5);
  EXPECT_DOUBLE_EQ(s[0].individual, 1);
  // A rank without timed steps (a GPU step that was not sampled) gets no score.
  RankWindow none;
  EXPECT_EQ(score_window({window(1, 5, 10, 0, 1), none}, best).size(), 1u);
}

TEST(DebugSlowSeam, ParsesRankPhaseMsAndRefusesTheRest) {
  const auto s = parse_debug_slow("3:backward:200");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 3);
  EXPECT_EQ(s->phase, Phase::Backward);
  EXPECT_DOUBLE_EQ(s->ms, 200);
  EXPECT_EQ(parse_debug_slow("0:data:1.5")->phase, Phase::Data);
  for (const char* bad : {"", "3", "3:backward", "x:backward:5", "3:comm:5", "3:sideways:5",
                          "3:backward:0", "3:backward:-1", "-1:data:5", "3:data:5ms"})
    EXPECT_FALSE(parse_debug_slow(bad).has_value()) << bad;
}

// The line a user acts on: who, where, which phase, how slow, what it costs the others. A world of
// one names no phase and no cost (nobody waits for it): its yardstick is its own best window.
TEST(StragglerLine, NamesRankHostDevicePhaseScoreAndCost) {
  StragglerEvent e;
  e.score.rank = 1;
  e.score.relative = 0.5;
  e.score.individual = 0.9;
  e.score.slow_phase = Phase::Backward;
  e.score.excess_ms = 10;
  e.score.cost = 0.25;
  e.compute_ms = 20;
  e.fastest_ms = 10;
  e.fastest_rank = 0;
  e.windows_below = 2;
  const std::vector<RankPlacement> two = {{0, 0, "nodeA", 0, "cpu"}, {1, 0, "nodeB", 0, "cpu"}};
  EXPECT_EQ(straggler_line(40, e, two, 0.7),
            "straggler: rank 1 (host nodeB, cpu) is slow in backward: score 0.50 for 2 windows "
            "below 0.70 (compute 20.00 ms/step against 10.00 on rank 0, the fastest; its own best "
            "18.00); the other ranks wait 10.00 ms/step for it, 25% of their step time");
  e.recovered = true;
  EXPECT_EQ(straggler_line(60, e, two, 0.7),
            "straggler: rank 1 (host nodeB) recovered at step 60: score 0.50 (compute 20.00 "
            "ms/step against 10.00 on rank 0, the fastest)");
  e.recovered = false;
  e.score.rank = 0;
  e.score.individual = 0.5;
  const std::vector<RankPlacement> one = {{0, 0, "solo", 0, "cuda:0"}};
  EXPECT_EQ(straggler_line(40, e, one, 0.7),
            "straggler: rank 0 (host solo, cuda:0) is slower than its own best: score 0.50 for 2 "
            "windows below 0.70 (compute 20.00 ms/step against its own best 10.00)");
}

}  // namespace
}  // namespace mnist_ddp
