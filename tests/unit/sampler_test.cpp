// sampler_test.cpp — the PRNG's specified outputs, DistributedSampler semantics with rank/world
// as parameters, and exact evaluation sharding.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/data/sampler.hpp"

namespace mnist_ddp {
namespace {

TEST(SplitMix64, KnownOutputs) {
  // Reference values of SplitMix64 from seed 0 (Vigna's splitmix64.c).
  SplitMix64 r(0);
  EXPECT_EQ(r.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(r.next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(r.next(), 0x06c45d188009454fULL);
}

TEST(SplitMix64, BelowIsInRangeAndCoversIt) {
  SplitMix64 r(7);
  std::map<std::uint64_t, int> hist;
  for (int i = 0; i < 6000; ++i) hist[r.below(6)]++;
  ASSERT_EQ(hist.size(), 6u);
  for (auto [v, n] : hist) {
    EXPECT_LT(v, 6u);
    EXPECT_GT(n, 850);
    EXPECT_LT(n, 1150);
  }
}

TEST(Permutation, IsAPermutationAndDeterministic) {
  const auto p = permutation(1000, 42);
  auto s = p;
  std::sort(s.begin(), s.end());
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(s[i], i);
  EXPECT_EQ(p, permutation(1000, 42));
  EXPECT_NE(p, permutation(1000, 43));
  // Pinned known answer of the specified algorithm (rng.hpp) for n=10, seed=0, computed by an
  // independent Python transcription of the spec; any change to the PRNG or the shuffle (which
  // would change every run's data order) is caught.
  EXPECT_EQ(permutation(10, 0), (std::vector<std::int64_t>{6, 3, 2, 9, 8, 1, 4, 7, 0, 5}));
}

// (dataset size, world, drop_last, shuffle)
class SamplerTest : public ::testing::TestWithParam<std::tuple<int, int, bool, bool>> {};

TEST_P(SamplerTest, PyTorchSemantics) {
  const auto [n, world, drop_last, shuffle] = GetParam();
  const std::int64_t expect_per_rank =
      drop_last && n % world != 0 ? n / world : (n + world - 1) / world;
  std::vector<std::vector<std::int64_t>> per_rank;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, r, world, shuffle, 5, drop_last);
    s.set_epoch(3);
    EXPECT_EQ(s.num_samples(), expect_per_rank);
    per_rank.push_back(s.indices());
    EXPECT_EQ(static_cast<std::int64_t>(per_rank.back().size()), expect_per_rank);
  }
  // Reconstruct the global list: rank r holds positions r, r+R, ...
  std::vector<std::int64_t> global(static_cast<std::size_t>(expect_per_rank * world));
  for (int r = 0; r < world; ++r)
    for (std::size_t i = 0; i < per_rank[r].size(); ++i) global[i * world + r] = per_rank[r][i];
  std::vector<std::int64_t> base(n);
  if (shuffle) {
    base = permutation(n, 5 + 3);  // seed + epoch
  } else {
    std::iota(base.begin(), base.end(), 0);
  }
  for (std::size_t i = 0; i < global.size(); ++i) {
    // Padding repeats the head of the (shuffled) list; drop_last truncates.
    EXPECT_EQ(global[i], base[i % n]) << "position " << i;
  }
  if (!drop_last) {
    std::set<std::int64_t> seen(global.begin(), global.end());
    EXPECT_EQ(static_cast<int>(seen.size()), n);  // every sample visited
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, SamplerTest,
                         ::testing::Combine(::testing::Values(1, 7, 10, 60000, 10001),
                                            ::testing::Values(1, 2, 3, 4, 8), ::testing::Bool(),
                                            ::testing::Bool()));

TEST(Sampler, SetEpochChangesOrderSameEpochRepeats) {
  DistributedSampler s(100, 0, 2, true, 1, false);
  s.set_epoch(0);
  const auto a = s.indices();
  s.set_epoch(1);
  const auto b = s.indices();
  s.set_epoch(0);
  EXPECT_EQ(a, s.indices());
  EXPECT_NE(a, b);
}

TEST(Sampler, PaddingLargerThanDataset) {
  // 3 items over 8 ranks: PyTorch repeats the list cyclically.
  std::vector<std::int64_t> got;
  for (int r = 0; r < 8; ++r) {
    DistributedSampler s(3, r, 8, false, 0, false);
    const auto v = s.indices();
    ASSERT_EQ(v.size(), 1u);
    got.push_back(v[0]);
  }
  EXPECT_EQ(got, (std::vector<std::int64_t>{0, 1, 2, 0, 1, 2, 0, 1}));
}

class EvalShardTest : public ::testing::TestWithParam<std::tuple<int, int>> {};
TEST_P(EvalShardTest, EveryImageExactlyOnce) {
  const auto [n, world] = GetParam();
  std::vector<int> count(n, 0);
  std::int64_t lo = n, hi = 0;
  for (int r = 0; r < world; ++r) {
    const Shard s = eval_shard(n, r, world);
    lo = std::min(lo, s.end - s.begin);
    hi = std::max(hi, s.end - s.begin);
    for (auto i = s.begin; i < s.end; ++i) count[i]++;
  }
  for (int c : count) EXPECT_EQ(c, 1);
  EXPECT_LE(hi - lo, 1);
}
INSTANTIATE_TEST_SUITE_P(Grid, EvalShardTest,
                         ::testing::Combine(::testing::Values(1, 9, 10000, 10007),
                                            ::testing::Values(1, 2, 3, 7, 16)));

}  // namespace
}  // namespace mnist_ddp
