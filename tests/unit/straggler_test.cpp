// straggler_test.cpp — the straggler scores (score_window): relative to the fastest rank and to
// the rank's own best window, the slow phase, the cost to the other ranks; and the --debug-slow
// seam's parser.
#include <gtest/gtest.h>

#include <vector>

#include "mnist_ddp/train/debug_seams.hpp"
#include "mnist_ddp/train/straggler.hpp"

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

}  // namespace
}  // namespace mnist_ddp
