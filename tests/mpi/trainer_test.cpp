// trainer_test.cpp — the Trainer under mpirun: evaluation counts every test image exactly once and
// a short run trains.
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

TEST(Trainer, EvaluationCountsEveryTestImageOnceAndRunTrains) {
  const DataSplit data = synthetic(50, 1001, 3);
  Config cfg;
  cfg.train.schedule.batch_size = 7;
  cfg.train.schedule.eval_batch_size = 64;
  cfg.train.schedule.epochs = 1;
  cfg.train.cadence.log_every = 3;
  cfg.train.checkpoint.dir = temp_log_dir() + "/ckpt";
  if (world().rank() == 0) prepare_checkpoint_dir(cfg.train.checkpoint.dir);
  auto ops = make_cpu_ops();
  ConvNet model(*ops, 64);
  model.init(2);
  broadcast_model(world(), model, world());
  Logger log(world().rank(), temp_log_dir(), false);
  ops->load_dataset(Ops::kTrainSplit, data.train);
  ops->load_dataset(Ops::kEvalSplit, data.test);
  Trainer t(cfg.train, config_json(cfg),
            TrainerComms{world(), world(), plan_communication(cfg, Device::Cpu, world().size())},
            *ops, model, data, log);
  const EvalResult e = t.evaluate();
  EXPECT_EQ(e.count, 1001);
  EXPECT_GE(e.top5, e.top1);
  const TrainResult res = t.run();
  const std::int64_t per_rank = (50 + world().size() - 1) / world().size();
  EXPECT_EQ(res.steps, (per_rank + 6) / 7);
  EXPECT_EQ(res.final_eval.count, 1001);
  EXPECT_EQ(res.epochs_completed, 1);
  // The end of the epoch wrote a checkpoint that resumes at the start of the next epoch.
  if (world().rank() == 0) {
    const auto files = list_checkpoints(cfg.train.checkpoint.dir);
    ASSERT_EQ(files.size(), 1u);
    const TrainingState s = load_checkpoint(files[0], checkpoint_layout(model));
    EXPECT_EQ(s.step, res.steps);
    EXPECT_EQ(s.epoch, 1);
    EXPECT_EQ(s.sample_offset, 0);
    EXPECT_EQ(s.world_size, world().size());
    EXPECT_TRUE(std::equal(s.params.begin(), s.params.end(), model.params().begin()));
  }
}

}  // namespace
}  // namespace mnist_ddp
