// accumulate_test.cpp — the shape of an accumulated step (--accumulate): the micro-batch sizes at
// every position of an epoch, and the CUDA-graph keys that keep each kind of micro-batch its own
// graph (the flag itself: cli_test.cpp).
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "mnist_ddp/train/trainer.hpp"

namespace mnist_ddp {
namespace {

TEST(Accumulate, MicroBatchesFillTheStepWhileSamplesRemain) {
  using V = std::vector<int>;
  EXPECT_EQ(micro_batch_sizes(0, 1000, 100, 1), V({100}));
  EXPECT_EQ(micro_batch_sizes(0, 1000, 100, 3), V({100, 100, 100}));
  // The epoch's last step: fewer micro-batches, the last one short.
  EXPECT_EQ(micro_batch_sizes(900, 1000, 100, 3), V({100}));
  EXPECT_EQ(micro_batch_sizes(850, 1000, 100, 3), V({100, 50}));
  EXPECT_EQ(micro_batch_sizes(1000, 1000, 100, 3), V{});
  // Steps per epoch follow: 30000 samples per rank, 100 x 2 per step = 150 steps.
  std::int64_t offset = 0;
  int steps = 0;
  for (V s; !(s = micro_batch_sizes(offset, 30000, 100, 2)).empty(); ++steps)
    for (int n : s) offset += n;
  EXPECT_EQ(steps, 150);
  EXPECT_EQ(offset, 30000);
}

TEST(Accumulate, EveryKindOfMicroBatchHasItsOwnGraphKey) {
  std::set<std::int64_t> keys;
  for (int n : {1, 50, 100, 65536}) {
    for (int count : {1, 2, 3, 4096}) {
      for (int i = 0; i < count; i += (count > 4 ? count - 1 : 1)) {
        keys.insert(step_graph_key(n, MicroBatch{i, count}));
      }
    }
  }
  // Per (n, count): count 1 -> 1 kind, 2 -> first + last, 3 -> first + middle + last, 4096 ->
  // first + last sampled here; 4 batch sizes.
  EXPECT_EQ(keys.size(), 4u * (1 + 2 + 3 + 2));
  // Middle micro-batches of one step share a graph (the same work).
  EXPECT_EQ(step_graph_key(100, MicroBatch{1, 4}), step_graph_key(100, MicroBatch{2, 4}));
  EXPECT_NE(step_graph_key(100, MicroBatch{0, 4}), step_graph_key(100, MicroBatch{1, 4}));
  EXPECT_NE(step_graph_key(100, MicroBatch{3, 4}), step_graph_key(100, MicroBatch{2, 4}));
  // The loss scale 1/(n x count) is part of the graph: another count, another graph.
  EXPECT_NE(step_graph_key(100, MicroBatch{1, 2}), step_graph_key(100, MicroBatch{2, 3}));
}

}  // namespace
}  // namespace mnist_ddp
