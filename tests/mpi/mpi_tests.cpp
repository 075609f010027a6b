// mpi_tests.cpp — GoogleTest under mpirun (-np 2, -np 4 --oversubscribe): collectives with
// closed-form results, replicas bitwise identical after steps, DDP gradient averaging equal to
// the single-process gradient of the union batch (frozen BN), the replica check naming the
// diverged rank, and error agreement across ranks. Only rank 0 prints; any rank's failure fails.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "../common/compare.hpp"
#include "mnist_ddp/agree.hpp"
#include "mnist_ddp/check.hpp"
#include "mnist_ddp/checkpoint.hpp"
#include "mnist_ddp/comm.hpp"
#include "mnist_ddp/compress.hpp"
#include "mnist_ddp/dataset.hpp"
#include "mnist_ddp/ddp.hpp"
#include "mnist_ddp/log.hpp"
#include "mnist_ddp/model.hpp"
#include "mnist_ddp/ops.hpp"
#include "mnist_ddp/reducer.hpp"
#include "mnist_ddp/rng.hpp"
#include "mnist_ddp/runtime.hpp"
#include "mnist_ddp/trainer.hpp"

namespace mnist_ddp {
namespace {

// The world communicator of this file's tests: made after MPI_Init and destroyed in main before
// MPI_Finalize (its user-defined MPI ops are freed with it), never a function-local static.
std::unique_ptr<Comm> g_world;
Comm& comm() {
  return *g_world;
}

TEST(Collectives, AllreduceClosedForms) {
  const int r = comm().rank(), n = comm().size();
  std::vector<std::int32_t> i32 = {r + 1, 2 * (r + 1), -r};
  comm().allreduce(std::span<std::int32_t>(i32), ReduceOp::Sum);
  EXPECT_EQ(i32[0], n * (n + 1) / 2);
  EXPECT_EQ(i32[1], n * (n + 1));
  EXPECT_EQ(i32[2], -n * (n - 1) / 2);
  std::vector<std::int64_t> mx = {r, -r};
  comm().allreduce(std::span<std::int64_t>(mx), ReduceOp::Max);
  EXPECT_EQ(mx[0], n - 1);
  EXPECT_EQ(mx[1], 0);
  std::vector<double> mn = {static_cast<double>(r) + 0.5};
  comm().allreduce(std::span<double>(mn), ReduceOp::Min);
  EXPECT_EQ(mn[0], 0.5);
  // Float sums of small integers are exact whatever the reduction order.
  std::vector<float> f(1000);
  for (int i = 0; i < 1000; ++i) f[i] = static_cast<float>((r + 1) * i);
  comm().allreduce(std::span<float>(f), ReduceOp::Sum);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(f[i], static_cast<float>(n * (n + 1) / 2 * i));
}

TEST(Collectives, AverageIsSumThenDivide) {
  const int r = comm().rank(), n = comm().size();
  std::vector<float> g = {static_cast<float>(r), 1.0f, static_cast<float>(2 * r + 1)};
  comm().allreduce_avg(g);
  EXPECT_FLOAT_EQ(g[0], static_cast<float>(n * (n - 1) / 2) / n);
  EXPECT_FLOAT_EQ(g[1], 1.0f);
  EXPECT_FLOAT_EQ(g[2], static_cast<float>(n * n) / n);
}

TEST(Collectives, BroadcastAndAllgather) {
  const int r = comm().rank(), n = comm().size();
  const int root = n - 1;
  std::vector<std::uint64_t> b = {static_cast<std::uint64_t>(r) * 7 + 3};
  comm().broadcast(std::span<std::uint64_t>(b), root);
  EXPECT_EQ(b[0], static_cast<std::uint64_t>(root) * 7 + 3);
  const std::uint64_t mine[2] = {static_cast<std::uint64_t>(r),
                                 static_cast<std::uint64_t>(r) * 1000};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(n));
  comm().allgather(std::span<const std::uint64_t>(mine, 2), all);
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(all[2 * k], static_cast<std::uint64_t>(k));
    EXPECT_EQ(all[2 * k + 1], static_cast<std::uint64_t>(k) * 1000);
  }
  const std::uint64_t before = comm().payload_bytes();
  std::vector<float> x(25, 1.0f);
  comm().allreduce(std::span<float>(x), ReduceOp::Sum);
  EXPECT_EQ(comm().payload_bytes() - before, n > 1 ? 100u : 0u);
}

// A synthetic dataset: deterministic random pixels and labels.
DataSplit synthetic(int train, int test, std::uint64_t seed) {
  DataSplit d;
  SplitMix64 r(seed);
  for (Dataset* s : {&d.train, &d.test}) {
    s->count = s == &d.train ? train : test;
    s->images.resize(static_cast<std::size_t>(s->count) * kImagePixels);
    s->labels.resize(static_cast<std::size_t>(s->count));
    for (auto& p : s->images) p = static_cast<std::uint8_t>(r.below(256));
    for (auto& l : s->labels) l = static_cast<std::uint8_t>(r.below(10));
  }
  d.mean = 0.5f;
  d.std = 0.3f;
  d.name = "synthetic";
  return d;
}

std::string temp_log_dir() {
  return (std::filesystem::temp_directory_path() / ("mnist_ddp_mpi_" + std::to_string(getppid())))
      .string();
}

TEST(Ddp, ReplicasStayBitwiseIdentical) {
  const int r = comm().rank();
  const DataSplit data = synthetic(64, 16, 11);
  Config cfg;
  cfg.batch_size = 8;
  cfg.eval_batch_size = 8;
  cfg.lr = 0.05;
  auto ops = make_cpu_ops();
  ConvNet model(*ops, 8);
  model.init(100 + static_cast<std::uint64_t>(r));  // deliberately different: broadcast must fix it
  broadcast_model(comm(), model, comm());
  const std::vector<float> initial(model.params().begin(), model.params().end());
  Logger log(r, temp_log_dir(), false);
  ops->load_dataset(Ops::kTrain, data.train);
  ops->load_dataset(Ops::kTest, data.test);
  Trainer t(cfg, comm(), comm(), *ops, model, data, log);
  std::vector<float> x(8 * kImagePixels);
  std::vector<std::int32_t> y(8);
  for (int step = 0; step < 5; ++step) {
    // Every rank trains on different images.
    std::vector<std::int64_t> idx(8);
    for (int i = 0; i < 8; ++i) idx[i] = (r * 8 + i + step * 3) % data.train.count;
    gather_batch(data.train, idx, data.mean, data.std, x.data(), y.data());
    t.step(x.data(), y.data(), 8);
  }
  EXPECT_FALSE(std::equal(initial.begin(), initial.end(), model.params().begin()));
  std::vector<std::uint64_t> hashes(static_cast<std::size_t>(comm().size()));
  const std::uint64_t mine = replica_hash(model);
  comm().allgather(std::span<const std::uint64_t>(&mine, 1), hashes);
  for (auto h : hashes) EXPECT_EQ(h, hashes[0]);
  EXPECT_NO_THROW(check_replicas(comm(), model, 5));
}

TEST(Ddp, AveragedGradientEqualsUnionBatchGradientFrozenBn) {
  const int r = comm().rank(), n = comm().size();
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
  broadcast_model(comm(), dist, comm());
  std::vector<float> x(kLocal * kImagePixels), dl(kLocal * 10);
  std::vector<std::int32_t> y(kLocal);
  batch(r, x, y, 0);
  const float* logits = dist.forward(x.data(), kLocal, Mode::Frozen);
  ops->softmax_cross_entropy(kLocal, 10, logits, y.data(), dl.data(), 1.0 / kLocal);
  dist.backward(dl.data(), nullptr);
  average_gradients(comm(), dist);

  ConvNet single(*ops, kLocal * n);
  single.init(5);
  std::vector<float> ux(static_cast<std::size_t>(kLocal) * n * kImagePixels), udl(kLocal * n * 10);
  std::vector<std::int32_t> uy(static_cast<std::size_t>(kLocal) * n);
  for (int k = 0; k < n; ++k) batch(k, ux, uy, static_cast<std::size_t>(k) * kLocal);
  const float* ulogits = single.forward(ux.data(), kLocal * n, Mode::Frozen);
  ops->softmax_cross_entropy(kLocal * n, 10, ulogits, uy.data(), udl.data(), 1.0 / (kLocal * n));
  single.backward(udl.data(), nullptr);

  double worst = 0;
  for (std::size_t i = 0; i < single.grads().size(); ++i) {
    const double a = dist.grads()[i], b = single.grads()[i];
    worst = testing::worst_of(worst, std::abs(a - b));
    ASSERT_NEAR(a, b, 1e-6 + 1e-4 * std::abs(b)) << "gradient element " << i;
  }
  // The same SGD step on both gives the same parameters (1-rank vs N-rank update).
  cpu::SgdParams sp;
  sp.lr = 0.1;
  sp.momentum = 0.9;
  Sgd s1(*ops, dist.params().size(), sp), s2(*ops, dist.params().size(), sp);
  s1.step(dist.params(), dist.grads(), 0.1);
  s2.step(single.params(), single.grads(), 0.1);
  for (std::size_t i = 0; i < single.params().size(); ++i)
    ASSERT_NEAR(dist.params()[i], single.params()[i], 1e-6) << i;
  if (r == 0) std::printf("max |avg grad - union grad| = %.3g over %d ranks\n", worst, n);
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
                                                     OverlapEngine engine = OverlapEngine::Test) {
  auto ops = make_cpu_ops();
  ConvNet a(*ops, 4), b(*ops, 4);
  a.init(seed);
  b.init(seed);
  SplitMix64 g(seed * 100 + static_cast<std::uint64_t>(comm().rank()));
  std::vector<float> x(4 * 784), dl(40);
  for (auto& v : x) v = g.uniform(-1, 2);
  const std::vector<std::int32_t> y = {1, 2, 3, 4};
  for (ConvNet* m : {&a, &b})
    ops->softmax_cross_entropy(4, 10, m->forward(x.data(), 4, Mode::Train), y.data(), dl.data(),
                               0.25);
  // The communication thread gets its own communicator (a duplicate of the world).
  std::unique_ptr<Comm> thread_comm =
      engine == OverlapEngine::Thread ? make_mpi_group_comm(0) : nullptr;
  Reducer red(comm(), a, 25 * 1024, true, hook, {}, engine, thread_comm.get());
  a.backward(dl.data(), [&](int layer) { red.layer_ready(layer); });
  red.finish();
  b.backward(dl.data(), nullptr);
  comm().allreduce_avg(b.grads());
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
  if (comm().size() <= 2) {
    EXPECT_EQ(r.max_diff, 0.0);
  } else {
    EXPECT_LT(r.max_diff, 1e-6);
  }
  if (comm().size() > 1) {
    EXPECT_GT(r.stats.wire_bytes, 0u);
  }
}

// A CUDA graph replay runs no host code: note_replayed_step counts the bytes the captured step's
// all-reduces moved, so the per-epoch comm line is right with graphs (checked here on the CPU).
TEST(Ddp, ReplayedStepsCountTheCapturedStepsBytes) {
  auto ops = make_cpu_ops();
  ConvNet a(*ops, 2);
  a.init(3);
  Reducer red(comm(), a, 25 * 1024, true);
  for (int layer = ConvNet::kLayers - 1; layer >= 0; --layer) red.layer_ready(layer);
  red.finish();
  red.note_replayed_step();
  red.note_replayed_step();
  const ReducerStats s = red.take_stats();
  EXPECT_EQ(s.steps, 3);
  EXPECT_EQ(s.payload_bytes, 3 * a.grads().size_bytes());
  // After take_stats, a replay counts the last step again (not the epoch's total).
  red.note_replayed_step();
  EXPECT_EQ(red.take_stats().payload_bytes, a.grads().size_bytes());
}

TEST(Ddp, CommunicationThreadEqualsOneAllreduce) {
  ASSERT_TRUE(mpi_thread_multiple()) << "Open MPI grants MPI_THREAD_MULTIPLE";
  const ReducerComparison r =
      compare_reducer_with_one_allreduce(8, Compression::None, OverlapEngine::Thread);
  EXPECT_EQ(r.launch_order, (std::vector<int>{0, 1, 2}));
  if (comm().size() <= 2) {
    EXPECT_EQ(r.max_diff, 0.0);
  } else {
    EXPECT_LT(r.max_diff, 1e-6);
  }
  // The hooks travel through the thread too.
  const ReducerComparison h =
      compare_reducer_with_one_allreduce(9, Compression::Bf16, OverlapEngine::Thread);
  EXPECT_LT(h.max_diff, 4 * comm().size() * std::ldexp(1.0, -7));
}

TEST(Ddp, Fp16AndBf16HooksApproximateTheAverage) {
  const int r = comm().rank(), n = comm().size();
  // A 16-bit sum of small integers is exact.
  std::vector<std::uint16_t> f16 = {to_fp16(static_cast<float>(r + 1))};
  std::vector<std::uint16_t> b16 = {to_bf16(static_cast<float>(r + 1))};
  comm().wait(comm().start_allreduce_sum16(f16, false));
  comm().wait(comm().start_allreduce_sum16(b16, true));
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
  const int n = comm().size();
  if (n < 2) GTEST_SKIP() << "needs 2+ ranks";
  auto ops = make_cpu_ops();
  ConvNet model(*ops, 2);
  model.init(1);
  broadcast_model(comm(), model, comm());
  if (comm().rank() == n - 1) model.params()[123] += 1e-6f;
  try {
    check_replicas(comm(), model, 42);
    ADD_FAILURE() << "divergence not detected";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank(s) " + std::to_string(n - 1)), std::string::npos) << m;
    EXPECT_NE(m.find("step 42"), std::string::npos) << m;
    EXPECT_EQ(e.exit_code(), kExitReplicaDiverged);
  }
}

TEST(Agreement, OneFailingRankStopsEveryRank) {
  const int n = comm().size();
  int code = 0;
  try {
    run_agreed(comm(), [&] {
      if (comm().rank() == n - 1) throw UserError("injected failure on the last rank", 7);
    });
  } catch (const AgreedExit& e) {
    code = e.code;
  }
  EXPECT_EQ(code, 7);
  // And a phase where nobody fails passes on every rank.
  EXPECT_NO_THROW(run_agreed(comm(), [] {}));
}

TEST(Trainer, EvaluationCountsEveryTestImageOnceAndRunTrains) {
  const DataSplit data = synthetic(50, 1001, 3);
  Config cfg;
  cfg.batch_size = 7;
  cfg.eval_batch_size = 64;
  cfg.epochs = 1;
  cfg.log_every = 3;
  cfg.checkpoint_dir = temp_log_dir() + "/ckpt";
  if (comm().rank() == 0) prepare_checkpoint_dir(cfg.checkpoint_dir);
  auto ops = make_cpu_ops();
  ConvNet model(*ops, 64);
  model.init(2);
  broadcast_model(comm(), model, comm());
  Logger log(comm().rank(), temp_log_dir(), false);
  ops->load_dataset(Ops::kTrain, data.train);
  ops->load_dataset(Ops::kTest, data.test);
  Trainer t(cfg, comm(), comm(), *ops, model, data, log);
  const EvalResult e = t.evaluate();
  EXPECT_EQ(e.count, 1001);
  EXPECT_GE(e.top5, e.top1);
  const TrainResult res = t.run();
  const std::int64_t per_rank = (50 + comm().size() - 1) / comm().size();
  EXPECT_EQ(res.steps, (per_rank + 6) / 7);
  EXPECT_EQ(res.final_eval.count, 1001);
  EXPECT_EQ(res.epochs_completed, 1);
  // The end of the epoch wrote a checkpoint that resumes at the start of the next epoch.
  if (comm().rank() == 0) {
    const auto files = list_checkpoints(cfg.checkpoint_dir);
    ASSERT_EQ(files.size(), 1u);
    const TrainingState s = load_checkpoint(files[0], checkpoint_layout(model));
    EXPECT_EQ(s.step, res.steps);
    EXPECT_EQ(s.epoch, 1);
    EXPECT_EQ(s.sample_offset, 0);
    EXPECT_EQ(s.world_size, comm().size());
    EXPECT_TRUE(std::equal(s.params.begin(), s.params.end(), model.params().begin()));
  }
}

}  // namespace
}  // namespace mnist_ddp

int main(int argc, char** argv) {
  mnist_ddp::mpi_init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mnist_ddp::set_error_identity(rank, mnist_ddp::host_name());
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  mnist_ddp::g_world = mnist_ddp::make_mpi_comm();
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  mnist_ddp::g_world.reset();
  // Collective: the suite fails if any rank saw a failure (rank 0 alone prints).
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && failed) std::printf("mpi_tests: a failure was reported on at least one rank\n");
  std::error_code ec;
  if (rank == 0)
    std::filesystem::remove_all(
        std::filesystem::temp_directory_path() / ("mnist_ddp_mpi_" + std::to_string(getppid())),
        ec);
  MPI_Finalize();
  return failed;
}
