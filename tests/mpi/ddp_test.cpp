// ddp_test.cpp — data-parallel training under mpirun: replicas bitwise identical after steps, the
// averaged gradient equal to the single-process gradient of the union batch (frozen BN), bucketed
// all-reduces (overlapped, reverse layer order, the communication thread, 16-bit hooks) equal to
// one all-reduce, and the replica check naming the diverged rank.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "../common/compare.hpp"
#include "mnist_ddp/app/plan_communication.hpp"
#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/checkpoint/store.hpp"
#include "mnist_ddp/comm/agree.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/compress.hpp"
#include "mnist_ddp/comm/reducer.hpp"
#include "mnist_ddp/comm/replicas.hpp"
#include "mnist_ddp/comm/threaded_comm.hpp"
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

TEST(Ddp, ReplicasStayBitwiseIdentical) {
  const int r = world().rank();
  const DataSplit data = synthetic(64 * world().size(), 16, 11);
  Config cfg;
  cfg.train.schedule.batch_size = 8;
  cfg.train.schedule.eval_batch_size = 8;
  cfg.train.optimizer.lr.base_lr = 0.05;
  cfg.train.schedule.max_steps =
      5;  // every rank trains on its own images (the sampler's disjoint shards)
  cfg.train.checkpoint.dir = temp_log_dir() + "/replicas-ckpt";
  if (r == 0) prepare_checkpoint_dir(cfg.train.checkpoint.dir);
  auto ops = make_cpu_ops();
  ConvNet model(*ops, 8);
  model.init(100 + static_cast<std::uint64_t>(r));  // deliberately different: broadcast must fix it
  broadcast_model(world(), model, world());
  const std::vector<float> initial(model.params().begin(), model.params().end());
  Logger log(r, temp_log_dir(), false);
  ops->load_dataset(Ops::kTrainSplit, data.train);
  ops->load_dataset(Ops::kEvalSplit, data.test);
  Trainer t(cfg.train, config_json(cfg),
            TrainerComms{world(), world(), plan_communication(cfg, Device::Cpu, world().size())},
            *ops, model, data, log);
  EXPECT_EQ(t.run().steps, 5);
  EXPECT_FALSE(std::equal(initial.begin(), initial.end(), model.params().begin()));
  std::vector<std::uint64_t> hashes(static_cast<std::size_t>(world().size()));
  const std::uint64_t mine = replica_hash(model);
  world().allgather(std::span<const std::uint64_t>(&mine, 1), hashes);
  for (auto h : hashes) EXPECT_EQ(h, hashes[0]);
  EXPECT_NO_THROW(check_replicas(world(), model, 5));
}

TEST(Ddp, AveragedGradientEqualsUnionBatchGradientFrozenBn) {
  const int r = world().rank(), n = world().size();
  constexpr int kLocal = 4;
  auto ops = make_cpu_ops();
  // Every rank can rebuild every rank's batch: batch of rank k uses seed 1000 + k.
  auto batch = [](int k, std::vector<float>& x, std::vector<std::int32_t>& y, std::size_t at) {
    SplitMix64 g(1000 + static_cast<std::uint64_t>(k));
    for (int i = 0; i < kLocal * kImagePixels; ++i) x[at * kImagePixels + i] = g.uniform(-1, 2);
    for (int i = 0; i < kLocal; ++i) y[at + i] = static_cast<std::int32_t>(g.below(10));
  };
  ConvNet dist(*ops, kLocal);
  dist.init(5);
  broadcast_model(world(), dist, world());
  std::vector<float> x(kLocal * kImagePixels), dl(kLocal * 10);
  std::vector<std::int32_t> y(kLocal);
  batch(r, x, y, 0);
  const float* logits = dist.forward(x.data(), kLocal, Mode::Frozen);
  ops->softmax_cross_entropy(kLocal, 10, logits, y.data(), dl.data(), 1.0 / kLocal);
  dist.backward(dl.data(), nullptr);
  average_gradients(world(), dist);

  ConvNet single(*ops, kLocal * n);
  single.init(5);
  std::vector<float> ux(static_cast<std::size_t>(kLocal) * n * kImagePixels), udl(kLocal * n * 10);
  std::vector<std::int32_t> uy(static_cast<std::size_t>(kLocal) * n);
  for (int k = 0; k < n; ++k) batch(k, ux, uy, static_cast<std::size_t>(k) * kLocal);
  const float* ulogits = single.forward(ux.data(), kLocal * n, Mode::Frozen);
  ops->softmax_cross_entropy(kLocal * n, 10, ulogits, uy.data(), udl.data(), 1.0 / (kLocal * n));
  single.backward(udl.data(), nullptr);

  // Both are float32 evaluations of the union batch's gradient in other summation orders (each
  // rank's 4 images, then the all-reduce, against one sum over all): each within gamma_K of the
  // exact one relative to the magnitudes summed (compare.hpp), K = the longest float32 sum of the
  // step (layer1's filter gradient over the union's 4 n x 28 x 28 pixels, plus the n-term
  // all-reduce), the magnitude taken as the largest gradient element.
  double largest = 0;
  for (float g : single.grads()) largest = testing::worst_of(largest, std::abs(double(g)));
  const double bound = 2 * testing::float32_gamma(double(kLocal) * n * kImagePixels + n) * largest;
  double worst = 0;
  for (std::size_t i = 0; i < single.grads().size(); ++i) {
    const double a = dist.grads()[i], b = single.grads()[i];
    worst = testing::worst_of(worst, std::abs(a - b));
    ASSERT_LE(std::abs(a - b), bound) << "gradient element " << i;
  }
  // The same SGD step on both gives the same parameters (1-rank vs N-rank update).
  SgdParams sp;
  sp.lr = 0.1;
  sp.momentum = 0.9;
  Sgd s1(*ops, dist.params().size(), sp), s2(*ops, dist.params().size(), sp);
  ops->set_step_scalars({0, 0.1, true});
  s1.step(dist.params(), dist.grads());
  s2.step(single.params(), single.grads());
  // The step adds lr x (momentum buffer = gradient) to each parameter: the gradients' difference
  // times lr, plus a rounding of each result (u |p|, twice).
  for (std::size_t i = 0; i < single.params().size(); ++i) {
    const double p = single.params()[i];
    ASSERT_LE(std::abs(dist.params()[i] - p), 0.1 * bound + 2 * std::ldexp(std::abs(p), -24)) << i;
  }
  if (r == 0) {
    std::printf("max |avg grad - union grad| = %.3g over %d ranks (bound %.3g)\n", worst, n, bound);
  }
}

// Two identical models do a forward/backward on this rank's own 4 images; one averages its
// gradients through a Reducer (25 KiB buckets, overlapped, with `hook`), the other with one
// all-reduce of the whole arena. Reports the largest difference relative to the largest
// reference gradient, the bucket launch order and the reducer's statistics.
struct ReducerComparison {
  double max_diff = 0;
  std::vector<int> launch_order;
  ReducerStats stats;
};

ReducerComparison compare_reducer_with_one_allreduce(std::uint64_t seed, Compression hook,
                                                     OverlapEngine engine = OverlapEngine::Poll) {
  auto ops = make_cpu_ops();
  ConvNet a(*ops, 4), b(*ops, 4);
  a.init(seed);
  b.init(seed);
  SplitMix64 g(seed * 100 + static_cast<std::uint64_t>(world().rank()));
  std::vector<float> x(4 * 784), dl(40);
  for (auto& v : x) v = g.uniform(-1, 2);
  const std::vector<std::int32_t> y = {1, 2, 3, 4};
  for (ConvNet* m : {&a, &b})
    ops->softmax_cross_entropy(4, 10, m->forward(x.data(), 4, Mode::Train), y.data(), dl.data(),
                               0.25);
  // The communication thread gets its own communicator (a duplicate of the world), wrapped.
  std::unique_ptr<Comm> thread_comm =
      engine == OverlapEngine::Thread ? make_threaded_comm(make_mpi_group_comm(0)) : nullptr;
  Reducer red(thread_comm ? *thread_comm : world(), a, 25 * 1024, true, hook);
  a.backward(dl.data(), [&](int layer) { red.layer_ready(layer); });
  red.finish();
  red.count_step();
  b.backward(dl.data(), nullptr);
  world().allreduce_avg(b.grads());
  ReducerComparison out;
  double scale = 1e-6;
  for (float v : b.grads()) scale = testing::worst_of(scale, std::abs(double(v)));
  for (std::size_t i = 0; i < a.grads().size(); ++i)
    out.max_diff =
        testing::worst_of(out.max_diff, std::abs(double(a.grads()[i]) - b.grads()[i]) / scale);
  out.launch_order = red.launch_order();
  out.stats = red.take_stats();
  return out;
}

TEST(Ddp, OverlappedBucketsLaunchInReverseOrderAndEqualOneAllreduce) {
  const ReducerComparison r = compare_reducer_with_one_allreduce(8, Compression::None);
  EXPECT_EQ(r.launch_order, (std::vector<int>{0, 1, 2}));  // fc, layer2, layer1
  // Same sums, divided the same way: bitwise equal on 2 ranks; MPI may order a 4-rank
  // non-blocking sum differently from the blocking one, so allow float rounding there.
  if (world().size() <= 2) {
    EXPECT_EQ(r.max_diff, 0.0);
  } else {
    EXPECT_LT(r.max_diff, 1e-6);
  }
  if (world().size() > 1) {
    EXPECT_GT(r.stats.wire_bytes, 0u);
  }
}

// A CUDA graph replay runs no host code: the trainer counts every step with count_step, which
// adds the bytes of the step last run on the host, so the per-epoch comm line is right with
// graphs (checked here on the CPU: one step run, three counted).
TEST(Ddp, EveryCountedStepAddsTheLastRunStepsBytes) {
  auto ops = make_cpu_ops();
  ConvNet a(*ops, 2);
  a.init(3);
  Reducer red(world(), a, 25 * 1024, true);
  for (int layer = ConvNet::kLayers - 1; layer >= 0; --layer) red.layer_ready(layer);
  red.finish();
  EXPECT_EQ(red.take_stats().payload_bytes, 0u) << "finish() alone counts nothing";
  red.count_step();
  red.count_step();
  red.count_step();
  const ReducerStats s = red.take_stats();
  EXPECT_EQ(s.steps, 3);
  EXPECT_EQ(s.payload_bytes, 3 * a.grads().size_bytes());
  // After take_stats, a counted step adds the last step again (not the epoch's total).
  red.count_step();
  EXPECT_EQ(red.take_stats().payload_bytes, a.grads().size_bytes());
}

TEST(Ddp, CommunicationThreadEqualsOneAllreduce) {
  ASSERT_TRUE(mpi_thread_multiple()) << "Open MPI grants MPI_THREAD_MULTIPLE";
  const ReducerComparison r =
      compare_reducer_with_one_allreduce(8, Compression::None, OverlapEngine::Thread);
  EXPECT_EQ(r.launch_order, (std::vector<int>{0, 1, 2}));
  if (world().size() <= 2) {
    EXPECT_EQ(r.max_diff, 0.0);
  } else {
    EXPECT_LT(r.max_diff, 1e-6);
  }
  // The hooks travel through the thread too.
  const ReducerComparison h =
      compare_reducer_with_one_allreduce(9, Compression::Bf16, OverlapEngine::Thread);
  EXPECT_LT(h.max_diff, 4 * world().size() * std::ldexp(1.0, -7));
}

TEST(Ddp, AReducerUnwoundMidStepLeavesTheCommunicationThreadUsable) {
  ASSERT_TRUE(mpi_thread_multiple()) << "Open MPI grants MPI_THREAD_MULTIPLE";
  // A group of one per rank: the thread's sums are this rank's alone, so one rank may leave a
  // step half-done without its peers.
  const std::unique_ptr<Comm> comm = make_threaded_comm(make_mpi_group_comm(world().rank()));
  ASSERT_EQ(comm->size(), 1);
  auto ops = make_cpu_ops();
  ConvNet model(*ops, 2);
  model.init(5);
  const std::vector<float> x(2 * 784, 0.5f);
  const std::vector<std::int32_t> y = {3, 7};
  std::vector<float> dl(20);
  auto backward_once = [&](Reducer* red) {
    ops->softmax_cross_entropy(2, 10, model.forward(x.data(), 2, Mode::Train), y.data(), dl.data(),
                               0.5);
    model.backward(dl.data(), [&](int layer) {
      if (red != nullptr) red->layer_ready(layer);
    });
  };
  backward_once(nullptr);
  const std::vector<float> expect(model.grads().begin(), model.grads().end());
  {
    // Every bucket started during backward, none finished: the Reducer goes as on an exception.
    Reducer unwound(*comm, model, 25 * 1024, true);
    backward_once(&unwound);
    EXPECT_EQ(unwound.launch_order(), (std::vector<int>{0, 1, 2}));
  }
  // The next step on the same thread: requests from 0 again, each waited, the average of one.
  Reducer next(*comm, model, 25 * 1024, true);
  backward_once(&next);
  next.finish();
  ASSERT_EQ(model.grads().size(), expect.size());
  for (std::size_t i = 0; i < expect.size(); ++i) ASSERT_EQ(model.grads()[i], expect[i]) << i;
}

TEST(Ddp, Fp16AndBf16HooksApproximateTheAverage) {
  const int r = world().rank(), n = world().size();
  // A 16-bit sum of small integers is exact.
  std::vector<std::uint16_t> f16 = {to_fp16(static_cast<float>(r + 1))};
  std::vector<std::uint16_t> b16 = {to_bf16(static_cast<float>(r + 1))};
  world().wait(world().start_allreduce_sum(std::span<std::uint16_t>(f16), DType::F16));
  world().wait(world().start_allreduce_sum(std::span<std::uint16_t>(b16), DType::BF16));
  EXPECT_EQ(from_fp16(f16[0]), static_cast<float>(n * (n + 1) / 2));
  EXPECT_EQ(from_bf16(b16[0]), static_cast<float>(n * (n + 1) / 2));
  // Through the Reducer: the average within 16-bit rounding of the fp32 average, half the bytes.
  for (Compression c : {Compression::Fp16, Compression::Bf16}) {
    const ReducerComparison rc = compare_reducer_with_one_allreduce(9, c);
    const double ulp = c == Compression::Fp16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    // Encode + divide + (n-1) 16-bit additions: a few ulps of the largest gradient.
    EXPECT_LT(rc.max_diff, 4 * n * ulp) << to_string(c);
    EXPECT_GT(rc.max_diff, 0.0) << to_string(c) << " should be lossy";
    const std::size_t elems = 29034;
    if (n > 1) {
      EXPECT_EQ(rc.stats.wire_bytes, static_cast<std::uint64_t>(2.0 * (n - 1) / n * elems * 2));
    }
  }
}

TEST(Ddp, CheckReplicasNamesTheDivergedRank) {
  const int n = world().size();
  if (n < 2) GTEST_SKIP() << "needs 2+ ranks";
  auto ops = make_cpu_ops();
  ConvNet model(*ops, 2);
  model.init(1);
  broadcast_model(world(), model, world());
  if (world().rank() == n - 1) model.params()[123] += 1e-6f;
  try {
    check_replicas(world(), model, 42);
    ADD_FAILURE() << "divergence not detected";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank(s) " + std::to_string(n - 1)), std::string::npos) << m;
    EXPECT_NE(m.find("step 42"), std::string::npos) << m;
    EXPECT_EQ(e.exit_code(), kExitReplicaDiverged);
  }
}

}  // namespace
}  // namespace mnist_ddp
