// dry_run_test.cpp — --dry-run's plan: the checkpoint steps a run writes, and the plan's lines
// (steps, batches per rank, evaluation, checkpoints, outputs, communication).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mnist_ddp/app/dry_run.hpp"
#include "test_util.hpp"

namespace mnist_ddp {
namespace {

RunShape shape(std::int64_t first, std::int64_t total, std::int64_t per_epoch) {
  RunShape r;
  r.world = 2;
  r.nodes = 1;
  r.device = "cpu";
  r.first_step = first;
  r.total_steps = total;
  r.steps_per_epoch = per_epoch;
  r.train_images = 6000;
  r.test_images = 1000;
  r.log_path = "logs/mnist_train.log";
  r.metrics_path = "logs/metrics.jsonl";
  return r;
}

TEST(DryRun, CheckpointStepsAreEveryNEachEpochsEndAndTheLast) {
  Config c = testing::parse_flags({"--checkpoint-every", "25", "--epochs", "3"});
  EXPECT_EQ(planned_checkpoint_steps(c, shape(0, 90, 30)),
            (std::vector<std::int64_t>{25, 30, 50, 60, 75, 90}));
  // Resumed at 55: only what is still ahead; --max-steps 70 inside epoch 3 ends on 70.
  EXPECT_EQ(planned_checkpoint_steps(c, shape(55, 70, 30)), (std::vector<std::int64_t>{60, 70}));
  c = testing::parse_flags({});
  EXPECT_EQ(planned_checkpoint_steps(c, shape(0, 60, 30)), (std::vector<std::int64_t>{30, 60}));
  EXPECT_TRUE(planned_checkpoint_steps(c, shape(60, 60, 30)).empty());  // a finished run
}

TEST(DryRun, PlanNamesStepsBatchesEvaluationCheckpointsOutputsAndCommunication) {
  const Config c = testing::parse_flags({"--epochs", "3", "--max-steps", "70", "--accumulate", "2",
                                         "--eval-every", "20", "--keep-best", "--keep", "2",
                                         "--checkpoint-dir", "/ck"});
  CommPlan plan;
  std::string all;
  for (const auto& line : dry_run_plan(c, shape(10, 70, 30), plan)) all += line + "\n";
  for (const char* want :
       {"plan: 60 step(s), 11 to 70 (3 epoch(s) x 30 steps/epoch, capped by --max-steps), "
        "continuing from step 10",
        "each step 100 image(s) per rank x 2 micro-batches = 400 globally on 2 rank(s)",
        "60 batch(es) per rank per epoch", "every 20 steps and at each epoch's end",
        "plan: 3 checkpoint(s) into /ck (steps 30 60 70;",
        "keeping the newest 2 and the best by test top-1 as ckpt-best.h5",
        "gradients all-reduced by MPI on host memory, in 25 KiB buckets during backward",
        "outputs: log ", "logs/mnist_train.log, metrics "}) {
    EXPECT_NE(all.find(want), std::string::npos) << want << "\nin:\n" << all;
  }
  const Config e = testing::parse_flags({"--eval-only", "--resume", "x.h5"});
  const auto lines = dry_run_plan(e, shape(0, 60, 30), plan);
  EXPECT_NE(lines[0].find("evaluate the --resume checkpoint on the 1000 test images"),
            std::string::npos)
      << lines[0];
}

}  // namespace
}  // namespace mnist_ddp
