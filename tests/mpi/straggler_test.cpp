// straggler_test.cpp — StragglerMonitor across ranks: windows of synthetic step phases, one
// allgather each; the last rank, slow in backward, is named after two windows (not after one),
// its recovery after two good ones, the same events on every rank; the node table; a window with
// too few timed steps (the GPU times one step in 50) is carried on, not scored.
#include <gtest/gtest.h>

#include <vector>

#include "mnist_ddp/train/straggler.hpp"
#include "world.hpp"

namespace mnist_ddp {
namespace {

TEST(Stragglers, TheSlowRankIsNamedAfterTwoWindowsAndRecoversAfterTwo) {
  const int n = world().size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<RankPlacement> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back({r, r, r < n / 2 ? "nodeA" : "nodeB", 0, "cpu"});
  StragglerMonitor m(0.7, ranks);
  const bool slow = world().rank() == n - 1;
  // 0.001 s data, 0.005 forward, backward 0.010 (0.030 on the slow rank), 0.001 optimizer.
  const auto windows = [&](double backward_slow, int count) {
    std::vector<std::vector<StragglerEvent>> out;
    for (int w = 0; w < count; ++w) {
      for (int s = 0; s < 10; ++s)
        m.add({0.001, 0.005, slow ? backward_slow : 0.010, slow ? 0.0 : backward_slow - 0.010,
               0.001});
      out.push_back(m.end_window(world()));
    }
    return out;
  };
  const auto bad = windows(0.030, 2);
  EXPECT_TRUE(bad[0].empty());  // one window below is not enough
  ASSERT_EQ(bad[1].size(), 1u);
  EXPECT_EQ(bad[1][0].score.rank, n - 1);
  EXPECT_FALSE(bad[1][0].recovered);
  EXPECT_EQ(bad[1][0].score.slow_phase, Phase::Backward);
  EXPECT_NEAR(bad[1][0].score.relative, 17.0 / 37.0, 1e-9);
  EXPECT_TRUE(windows(0.030, 1)[0].empty());  // said once while it stays slow
  const auto good = windows(0.010, 2);
  EXPECT_TRUE(good[0].empty());
  ASSERT_EQ(good[1].size(), 1u);
  EXPECT_TRUE(good[1][0].recovered);
  // The node table: nodeB holds the last rank, whose median window is the slow one (3 of 5).
  const auto table = m.node_table();
  ASSERT_EQ(table.size(), n > 1 && n / 2 > 0 ? 2u : 1u);
  EXPECT_EQ(table[0].host, "nodeB");
  EXPECT_TRUE(table[0].measured && table[1].measured);
  EXPECT_LT(table[0].score, 0.7);
  EXPECT_EQ(table[1].host, "nodeA");
  EXPECT_DOUBLE_EQ(table[1].score, 1);
}

// One timed step per window (the GPU's sampling with --log-every 50) is noise: such windows are
// carried on until every rank has 5 steps, so a slow step among 4 fast ones is diluted, not
// flagged.
TEST(Stragglers, WindowsWithTooFewTimedStepsAreCarriedNotScored) {
  const int n = world().size();
  std::vector<RankPlacement> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back({r, r, "nodeA", 0, "cpu"});
  StragglerMonitor m(0.7, ranks);
  const PhaseSeconds fast{0.001, 0.005, 0.010, 0.0, 0.001};
  // Rank 0's single step of the first window is 3x slower; 4 normal windows follow, one step each.
  const bool first_slow = world().rank() == 0;
  PhaseSeconds slow = fast;
  slow[static_cast<std::size_t>(Phase::Backward)] = 0.040;
  for (int w = 0; w < 4; ++w) {
    m.add(w == 0 && first_slow ? slow : fast);
    EXPECT_TRUE(m.end_window(world()).empty()) << "window " << w << " has " << w + 1 << " steps";
    ASSERT_EQ(m.node_table().size(), 1u);
    EXPECT_FALSE(m.node_table()[0].measured) << "nothing scored yet";
    EXPECT_EQ(m.node_table()[0].compute_ms, 0);
  }
  m.add(fast);
  EXPECT_TRUE(m.end_window(world()).empty());  // scored now: 5 steps, one slow (mean 1.36x)
  const auto table = m.node_table();
  ASSERT_EQ(table.size(), 1u);
  EXPECT_TRUE(table[0].measured);
  // Rank 0's window: (4 * 17 + 47) / 5 = 23 ms; the node's value is the median over its ranks.
  const double expect = n == 1 ? 23.0 : (n == 2 ? (23.0 + 17.0) / 2 : 17.0);
  EXPECT_NEAR(table[0].compute_ms, expect, 1e-9);
}

}  // namespace
}  // namespace mnist_ddp
