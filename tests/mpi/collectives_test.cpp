// collectives_test.cpp — collectives under mpirun with closed-form results: all-reduce (sum, max,
// min, average = sum then divide), broadcast and all-gather.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "../common/compare.hpp"
#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/comm/agree.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/compress.hpp"
#include "mnist_ddp/comm/reducer.hpp"
#include "mnist_ddp/comm/replicas.hpp"
#include "mnist_ddp/data/dataset.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/diagnostics/log.hpp"
#include "mnist_ddp/launch/identity.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/train/trainer.hpp"
#include "world.hpp"

namespace mnist_ddp {
namespace {

TEST(Collectives, AllreduceClosedForms) {
  const int r = world().rank(), n = world().size();
  std::vector<std::int32_t> i32 = {r + 1, 2 * (r + 1), -r};
  world().allreduce(std::span<std::int32_t>(i32), ReduceOp::Sum);
  EXPECT_EQ(i32[0], n * (n + 1) / 2);
  EXPECT_EQ(i32[1], n * (n + 1));
  EXPECT_EQ(i32[2], -n * (n - 1) / 2);
  std::vector<std::int64_t> mx = {r, -r};
  world().allreduce(std::span<std::int64_t>(mx), ReduceOp::Max);
  EXPECT_EQ(mx[0], n - 1);
  EXPECT_EQ(mx[1], 0);
  std::vector<double> mn = {static_cast<double>(r) + 0.5};
  world().allreduce(std::span<double>(mn), ReduceOp::Min);
  EXPECT_EQ(mn[0], 0.5);
  // Float sums of small integers are exact whatever the reduction order.
  std::vector<float> f(1000);
  for (int i = 0; i < 1000; ++i) f[i] = static_cast<float>((r + 1) * i);
  world().allreduce(std::span<float>(f), ReduceOp::Sum);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(f[i], static_cast<float>(n * (n + 1) / 2 * i));
}

TEST(Collectives, AverageIsSumThenDivide) {
  const int r = world().rank(), n = world().size();
  std::vector<float> g = {static_cast<float>(r), 1.0f, static_cast<float>(2 * r + 1)};
  world().allreduce_avg(g);
  EXPECT_FLOAT_EQ(g[0], static_cast<float>(n * (n - 1) / 2) / n);
  EXPECT_FLOAT_EQ(g[1], 1.0f);
  EXPECT_FLOAT_EQ(g[2], static_cast<float>(n * n) / n);
}

TEST(Collectives, BroadcastAndAllgather) {
  const int r = world().rank(), n = world().size();
  const int root = n - 1;
  std::vector<std::uint64_t> b = {static_cast<std::uint64_t>(r) * 7 + 3};
  world().broadcast(std::span<std::uint64_t>(b), root);
  EXPECT_EQ(b[0], static_cast<std::uint64_t>(root) * 7 + 3);
  const std::uint64_t mine[2] = {static_cast<std::uint64_t>(r),
                                 static_cast<std::uint64_t>(r) * 1000};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(n));
  world().allgather(std::span<const std::uint64_t>(mine, 2), all);
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(all[2 * k], static_cast<std::uint64_t>(k));
    EXPECT_EQ(all[2 * k + 1], static_cast<std::uint64_t>(k) * 1000);
  }
  const std::uint64_t before = world().payload_bytes();
  std::vector<float> x(25, 1.0f);
  world().allreduce(std::span<float>(x), ReduceOp::Sum);
  EXPECT_EQ(world().payload_bytes() - before, n > 1 ? 100u : 0u);
}

}  // namespace
}  // namespace mnist_ddp
