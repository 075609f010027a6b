// run_options_test.cpp — the flags reach the trainer: a command line with every setting the
// trainer reads set away from its default parses into the per-concern option structs
// (app/run_options.hpp) with those values, and the defaults the program resolves are resolved.
#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <vector>

#include "mnist_ddp/app/run_options.hpp"
#include "test_util.hpp"

namespace mnist_ddp {
namespace {

TEST(RunOptions, EveryTrainerFlagReachesItsOption) {
  // clang-format off
  // Every value distinct, so a flag mapped to another option's field fails.
  const Config cfg = testing::parse_flags({
      "--epochs", "7", "--max-steps", "123", "--batch-size", "32", "--accumulate", "3",
      "--eval-batch-size", "250", "--seed", "987654321", "--no-shuffle", "--drop-last",
      "--lr", "0.125", "--momentum", "0.375", "--dampening", "0.25", "--weight-decay", "0.001",
      "--lr-schedule", "step", "--lr-step-size", "14", "--lr-gamma", "0.5",
      "--warmup-steps", "11", "--min-lr", "0.0001",
      "--bucket-cap-kb", "40", "--no-overlap", "--compression", "powersgd",
      "--powersgd-rank", "15", "--powersgd-start-iter", "17",
      "--powersgd-min-compression-rate", "1.5", "--sync-bn",
      "--local-sgd-start", "9", "--local-sgd-period", "19",
      "--eval-every", "13", "--log-every", "6", "--check-replicas", "4",
      "--straggler-every", "8", "--straggler-threshold", "0.6",
      "--checkpoint-dir", "ck dir", "--checkpoint-every", "12", "--keep", "5", "--keep-best",
      "--requeue", "--requeue-signal", "HUP", "--amp", "bf16",
      "--debug-hang-rank", "1", "--debug-exit-rank", "2", "--debug-desync-rank", "16",
      "--debug-collectives", "--debug-slow", "10:forward:2.5", "--debug-sample-log", "samples",
      "--debug-fail-capture"});
  // clang-format on
  const TrainOptions o = train_options(cfg);

  EXPECT_EQ(o.schedule.epochs, 7);
  EXPECT_EQ(o.schedule.max_steps, 123);
  EXPECT_EQ(o.schedule.batch_size, 32);
  EXPECT_EQ(o.schedule.accumulate, 3);
  EXPECT_EQ(o.schedule.eval_batch_size, 250);
  EXPECT_EQ(o.schedule.seed, 987654321u);
  EXPECT_FALSE(o.schedule.shuffle);
  EXPECT_TRUE(o.schedule.drop_last);

  EXPECT_EQ(o.optimizer.sgd.lr, 0.125);
  EXPECT_EQ(o.optimizer.lr.base_lr, 0.125);
  EXPECT_EQ(o.optimizer.sgd.momentum, 0.375);
  EXPECT_EQ(o.optimizer.sgd.dampening, 0.25);
  EXPECT_EQ(o.optimizer.sgd.weight_decay, 0.001);
  EXPECT_FALSE(o.optimizer.sgd.nesterov);  // it needs --dampening 0: below
  EXPECT_EQ(o.optimizer.lr.schedule, LrSchedule::Step);
  EXPECT_EQ(o.optimizer.lr.step_size, 14);
  EXPECT_EQ(o.optimizer.lr.gamma, 0.5);
  EXPECT_EQ(o.optimizer.lr.warmup_steps, 11);
  EXPECT_EQ(o.optimizer.lr.min_lr, 0.0001);

  EXPECT_EQ(o.gradients.bucket_cap_bytes, 40u * 1024);
  EXPECT_FALSE(o.gradients.overlap);
  EXPECT_EQ(o.gradients.compression, Compression::PowerSgd);
  EXPECT_EQ(o.gradients.powersgd.rank, 15);
  EXPECT_EQ(o.gradients.powersgd.start_iter, 17);
  EXPECT_EQ(o.gradients.powersgd.min_compression_rate, 1.5);
  EXPECT_EQ(o.gradients.powersgd.seed, 987654321u);
  EXPECT_TRUE(o.gradients.sync_bn);
  EXPECT_EQ(o.gradients.local_sgd.start, 9);
  EXPECT_EQ(o.gradients.amp, AmpMode::Bf16);
  EXPECT_EQ(o.gradients.local_sgd.period, 19);

  EXPECT_EQ(o.cadence.eval_every, 13);
  EXPECT_EQ(o.cadence.log_every, 6);
  EXPECT_EQ(o.cadence.check_replicas, 4);
  EXPECT_EQ(o.cadence.straggler_every, 8);
  EXPECT_EQ(o.cadence.straggler_threshold, 0.6);

  EXPECT_EQ(o.checkpoint.dir, "ck dir");
  EXPECT_EQ(o.checkpoint.every, 12);
  EXPECT_EQ(o.checkpoint.keep, 5);
  EXPECT_TRUE(o.checkpoint.keep_best);

  EXPECT_TRUE(o.stop.requeue);
  EXPECT_EQ(o.stop.requeue_signal, SIGHUP);

  EXPECT_EQ(o.seams.hang_rank, 1);
  EXPECT_EQ(o.seams.exit_rank, 2);
  EXPECT_EQ(o.seams.desync_rank, 16);
  ASSERT_TRUE(o.seams.slow.has_value());
  EXPECT_EQ(o.seams.slow->rank, 10);
  EXPECT_EQ(o.seams.slow->phase, Phase::Forward);
  EXPECT_EQ(o.seams.slow->ms, 2.5);
  EXPECT_EQ(o.seams.sample_log, "samples");
  EXPECT_TRUE(o.seams.fail_capture);

  // The booleans the other way round (each one alone set, so a swapped pair fails).
  const TrainOptions n = train_options(testing::parse_flags({"--nesterov"}));
  EXPECT_TRUE(n.optimizer.sgd.nesterov);
  EXPECT_TRUE(n.schedule.shuffle);
  EXPECT_TRUE(n.gradients.overlap);
  EXPECT_FALSE(n.schedule.drop_last);
  EXPECT_FALSE(n.gradients.sync_bn);
  EXPECT_FALSE(n.checkpoint.keep_best);
  EXPECT_FALSE(n.stop.requeue);
  EXPECT_FALSE(n.seams.fail_capture);
  for (const char* flag : {"--drop-last", "--sync-bn", "--keep-best", "--requeue"}) {
    const TrainOptions one = train_options(testing::parse_flags({flag}));
    const int set = one.schedule.drop_last + one.gradients.sync_bn + one.checkpoint.keep_best +
                    one.stop.requeue;
    EXPECT_EQ(set, 1) << flag << " set " << set << " options";
  }
}

TEST(RunOptions, DefaultsResolveAsTheFlagsSay) {
  const TrainOptions d = train_options(testing::parse_flags({}));
  EXPECT_TRUE(d.gradients.overlap);
  EXPECT_EQ(d.gradients.bucket_cap_bytes, 25u * 1024);
  EXPECT_FALSE(d.gradients.local_sgd.on());
  EXPECT_FALSE(d.seams.slow.has_value());
  EXPECT_EQ(d.seams.hang_rank, -1);
  // --straggler-every's default (-1) is --log-every's window; 0 stays off.
  EXPECT_EQ(d.cadence.straggler_every, d.cadence.log_every);
  EXPECT_EQ(train_options(testing::parse_flags({"--log-every", "9"})).cadence.straggler_every, 9);
  EXPECT_EQ(train_options(testing::parse_flags({"--straggler-every", "0"})).cadence.straggler_every,
            0);
}

}  // namespace
}  // namespace mnist_ddp
