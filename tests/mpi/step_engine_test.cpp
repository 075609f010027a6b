// step_engine_test.cpp — the step engine (train/step_engine.hpp) on its own, under mpirun, against
// the oracle a step is defined by: the reference backend's gather, forward, loss and backward on
// each rank's batch, one all-reduce average of the whole gradient arena, and SGD. The engine's
// step (the Reducer's overlapped buckets, its accounting) gives the same parameters, bitwise on
// up to 2 ranks (the same sums, divided the same way), and counts the step into the run's record.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "../common/compare.hpp"
#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/app/plan_communication.hpp"
#include "mnist_ddp/comm/replicas.hpp"
#include "mnist_ddp/data/sampler.hpp"
#include "mnist_ddp/diagnostics/log.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/model/optimizer.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/train/report.hpp"
#include "mnist_ddp/train/step_engine.hpp"
#include "world.hpp"

namespace mnist_ddp {
namespace {

TEST(StepEngine, AStepIsTheReferenceForwardBackwardAverageAndSgd) {
  constexpr int kBatch = 8;
  constexpr double kLr = 0.05;
  const DataSplit data = synthetic(64, 16, 11);
  Config cfg;  // the flags' defaults: momentum 0.9, 25 KiB buckets, overlapped
  cfg.train.schedule.batch_size = kBatch;
  auto ops = make_cpu_ops();
  ops->load_dataset(Ops::kTrainSplit, data.train);
  ops->load_dataset(Ops::kEvalSplit, data.test);
  DistributedSampler sampler(data.train.count, world().rank(), world().size(), true, 42, false);
  sampler.set_epoch(0);
  const std::vector<std::int64_t> order = sampler.indices();
  ops->set_order(Ops::kTrainSplit, order);

  ConvNet engine_model(*ops, kBatch), oracle(*ops, kBatch);
  engine_model.init(3);
  oracle.init(3);
  Logger log(world().rank(), temp_log_dir(), false);
  Reporter report(cfg.train.schedule, cfg.train.gradients, log);
  StepEngine engine(
      cfg.train,
      TrainerComms{world(), world(), plan_communication(cfg, Device::Cpu, world().size())}, *ops,
      engine_model, data, report, log, nullptr);
  RunRecord rec;
  engine.run_step({kBatch}, kLr, rec);

  // The oracle: the same batch, BN buffers from rank 0, forward, loss gradient of the mean over
  // the local batch, backward, one all-reduce average of the arena, SGD's first step.
  std::vector<float> x(kBatch * kImagePixels), dl(kBatch * kClasses);
  std::vector<std::int32_t> y(kBatch);
  ops->set_step_scalars({0, kLr, true});
  ops->gather_at_step(Ops::kTrainSplit, kBatch, data.mean, data.std, x.data(), y.data());
  world().broadcast(oracle.buffers(), 0);
  const float* logits = oracle.forward(x.data(), kBatch, Mode::Train);
  ops->softmax_cross_entropy(kBatch, kClasses, logits, y.data(), dl.data(), 1.0 / kBatch);
  oracle.backward(dl.data(), nullptr);
  // The largest local gradient of any rank: the magnitude a reordered sum's rounding scales with.
  double largest = 0;
  for (float g : oracle.grads()) largest = testing::worst_of(largest, std::abs(double(g)));
  world().allreduce(std::span<double>(&largest, 1), ReduceOp::Max);
  world().allreduce_avg(oracle.grads());
  SgdParams sgd = cfg.train.optimizer.sgd;
  sgd.lr = kLr;
  Sgd oracle_sgd(*ops, oracle.params().size(), sgd);
  oracle_sgd.step(oracle.params(), oracle.grads());

  // Up to 2 ranks the bucketed sums are the whole arena's, bitwise. More: MPI may order an
  // n-term sum otherwise, within gamma_n of the largest term; SGD's first step moves a parameter
  // by lr x its gradient, plus the two roundings of the update (u |p| each).
  const double grad_bound =
      world().size() <= 2 ? 0.0 : testing::float32_gamma(world().size()) * largest;
  for (std::size_t i = 0; i < oracle.params().size(); ++i) {
    const double p = oracle.params()[i], q = engine_model.params()[i];
    const double bound =
        world().size() <= 2 ? 0.0 : kLr * grad_bound + 2 * std::ldexp(std::abs(p), -24);
    ASSERT_LE(std::abs(p - q), bound) << "parameter " << i;
  }
  // The step counted: the position, the window, the global images, the step counter.
  EXPECT_EQ(rec.step, 1);
  EXPECT_EQ(rec.offset, kBatch);
  EXPECT_EQ(rec.window_images, kBatch);
  EXPECT_EQ(rec.images, kBatch * world().size());
  EXPECT_EQ(rec.micro_runs, 1);
  EXPECT_EQ(rec.last_lr, kLr);
  EXPECT_EQ(engine.sgd().steps_taken(), 1);
  EXPECT_EQ(engine.reducer().launch_order(), (std::vector<int>{0, 1, 2}));  // fc, layer2, layer1
}

}  // namespace
}  // namespace mnist_ddp
