// flags_test.cpp — the option table (app/flags.cpp) fills each layer's option struct: a command
// line with every setting the trainer and the backend read set away from its default parses into
// the fields of Config's TrainOptions and BackendOptions with those values, and the defaults are
// the structs' own initialisers.
#include <gtest/gtest.h>

#include <csignal>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "test_util.hpp"

namespace mnist_ddp {
namespace {

TEST(Flags, EveryTrainerFlagFillsItsOptionField) {
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
      "--debug-fail-capture", "--cpu-kernels", "reference", "--tf32", "off"});
  // clang-format on
  const TrainOptions& o = cfg.train;

  EXPECT_EQ(o.schedule.epochs, 7);
  EXPECT_EQ(o.schedule.max_steps, 123);
  EXPECT_EQ(o.schedule.batch_size, 32);
  EXPECT_EQ(o.schedule.accumulate, 3);
  EXPECT_EQ(o.schedule.eval_batch_size, 250);
  EXPECT_EQ(o.schedule.seed, 987654321u);
  EXPECT_FALSE(o.schedule.shuffle);
  EXPECT_TRUE(o.schedule.drop_last);

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

  EXPECT_EQ(o.gradients.bucket_cap_kb, 40);
  EXPECT_FALSE(o.gradients.overlap);
  EXPECT_EQ(o.gradients.compression, Compression::PowerSgd);
  EXPECT_EQ(o.gradients.powersgd.rank, 15);
  EXPECT_EQ(o.gradients.powersgd.start_iter, 17);
  EXPECT_EQ(o.gradients.powersgd.min_compression_rate, 1.5);
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

  EXPECT_EQ(cfg.backend.cpu_kernels, CpuKernels::Reference);
  EXPECT_FALSE(cfg.backend.tf32);
  EXPECT_EQ(testing::parse_flags({"--gpu-kernels", "own"}).backend.gpu_kernels, GpuKernels::Own);

  // The booleans the other way round (each one alone set, so a swapped pair fails).
  const TrainOptions n = testing::parse_flags({"--nesterov"}).train;
  EXPECT_TRUE(n.optimizer.sgd.nesterov);
  EXPECT_TRUE(n.schedule.shuffle);
  EXPECT_TRUE(n.gradients.overlap);
  EXPECT_FALSE(n.schedule.drop_last);
  EXPECT_FALSE(n.gradients.sync_bn);
  EXPECT_FALSE(n.checkpoint.keep_best);
  EXPECT_FALSE(n.stop.requeue);
  EXPECT_FALSE(n.seams.fail_capture);
  for (const char* flag : {"--drop-last", "--sync-bn", "--keep-best", "--requeue"}) {
    const TrainOptions one = testing::parse_flags({flag}).train;
    const int set = one.schedule.drop_last + one.gradients.sync_bn + one.checkpoint.keep_best +
                    one.stop.requeue;
    EXPECT_EQ(set, 1) << flag << " set " << set << " options";
  }
}

// The defaults are the option structs' initialisers, as the flags document them; what the program
// derives from them (the straggler window from --log-every) is left to the code that uses it.
TEST(Flags, DefaultsAreTheOptionStructsOwn) {
  const Config d = testing::parse_flags({});
  EXPECT_EQ(nlohmann::json::parse(config_json(d)), nlohmann::json::parse(config_json(Config{})));
  EXPECT_TRUE(d.train.gradients.overlap);
  EXPECT_EQ(d.train.gradients.bucket_cap_kb, 25);
  EXPECT_FALSE(d.train.gradients.local_sgd.on());
  EXPECT_FALSE(d.train.seams.slow.has_value());
  EXPECT_EQ(d.train.seams.hang_rank, -1);
  EXPECT_EQ(d.train.optimizer.sgd.momentum, 0.9);
  EXPECT_EQ(d.train.cadence.straggler_every, -1);  // the trainer's: --log-every's window
  EXPECT_EQ(d.backend.cpu_kernels, CpuKernels::OneDnn);
  EXPECT_TRUE(d.backend.tf32);
  EXPECT_EQ(d.overlap_engine, OverlapEngine::Poll);
}

// --overlap-engine's old value `test` still means poll for one release, and is stored as poll.
TEST(Flags, OverlapEngineKeepsItsOldNameAsAnAlias) {
  const Config c = testing::parse_flags({"--overlap-engine", "test"});
  EXPECT_EQ(c.overlap_engine, OverlapEngine::Poll);
  EXPECT_NE(config_json(c).find(R"("overlap_engine":"poll")"), std::string::npos);
  EXPECT_EQ(testing::parse_flags({"--overlap-engine", "thread"}).overlap_engine,
            OverlapEngine::Thread);
  std::vector<std::string> unknown;
  const Config old = config_from_json(R"({"overlap_engine": "test"})", "", &unknown);
  EXPECT_EQ(old.overlap_engine, OverlapEngine::Poll);
  EXPECT_NE(help_text().find("`test`, poll's old name, is accepted until 0.2"), std::string::npos);
  // Given twice, the last one wins, the old name as any other; a wrong value names the flag and
  // lists the current names only.
  EXPECT_EQ(testing::parse_flags({"--overlap-engine", "thread", "--overlap-engine", "test"})
                .overlap_engine,
            OverlapEngine::Poll);
  EXPECT_EQ(testing::parse_flags({"--overlap-engine", "test", "--overlap-engine", "thread"})
                .overlap_engine,
            OverlapEngine::Thread);
  std::string error;
  try {
    testing::parse_flags({"--overlap-engine", "tset"});
  } catch (const UserError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("--overlap-engine: tset not in {poll,thread}"), std::string::npos) << error;
}

// What a resume compares is marked in the table: the settings that shape the optimisation.
TEST(Flags, TheResumeComparisonReadsTheTable) {
  const std::vector<std::string> keys = settings_compared_on_resume();
  const std::vector<std::string> expected = {
      "batch_size",   "accumulate", "lr",          "momentum",     "dampening",
      "weight_decay", "nesterov",   "lr_schedule", "lr_step_size", "lr_gamma",
      "warmup_steps", "min_lr",     "seed",        "amp"};
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()),
            std::set<std::string>(expected.begin(), expected.end()));
  const nlohmann::json stored = nlohmann::json::parse(config_json(Config{}));
  for (const std::string& k : keys) EXPECT_TRUE(stored.contains(k)) << k;
}

}  // namespace
}  // namespace mnist_ddp
