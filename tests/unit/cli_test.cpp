// cli_test.cpp — the command line: defaults, rejections that name the flag, and docs/flags.md
// documenting every flag the parser knows (so usage text cannot drift from the docs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/app/flag_rules.hpp"
#include "mnist_ddp/base/amp_mode.hpp"
#include "mnist_ddp/base/dtype.hpp"
#include "mnist_ddp/comm/compress.hpp"
#include "mnist_ddp/comm/reducer.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/launch/device.hpp"
#include "mnist_ddp/model/optimizer.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/trace/trace.hpp"
#include "test_util.hpp"

namespace mnist_ddp {
namespace {

std::string parse_error(std::vector<std::string> args) {
  args.insert(args.begin(), "mnist_ddp");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  Config c;
  try {
    parse_cli(static_cast<int>(argv.size()), argv.data(), c, false);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

Config parse_ok(std::vector<std::string> args) {
  return testing::parse_flags(std::move(args));
}

TEST(Cli, Defaults) {
  const Config c = parse_ok({});
  EXPECT_EQ(c.train.schedule.batch_size, 100);
  EXPECT_EQ(c.device, DeviceChoice::Auto);
  EXPECT_EQ(c.log_dir, "logging");
  EXPECT_TRUE(c.train.schedule.shuffle);
}

TEST(Cli, ParsesValues) {
  const Config c = parse_ok({"--epochs", "3", "--lr", "0.1", "--device", "cpu", "--nesterov",
                             "--lr-schedule", "cosine", "--no-shuffle", "--drop-last"});
  EXPECT_EQ(c.train.schedule.epochs, 3);
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr.base_lr, 0.1);
  EXPECT_EQ(c.device, DeviceChoice::Cpu);
  EXPECT_TRUE(c.train.optimizer.sgd.nesterov);
  EXPECT_EQ(c.train.optimizer.lr.schedule, LrSchedule::Cosine);
  EXPECT_FALSE(c.train.schedule.shuffle);
  EXPECT_TRUE(c.train.schedule.drop_last);
}

TEST(Cli, AmpModes) {
  EXPECT_EQ(parse_ok({}).train.gradients.amp, AmpMode::Off);
  EXPECT_EQ(parse_ok({"--amp", "fp16"}).train.gradients.amp, AmpMode::Fp16);
  EXPECT_EQ(parse_ok({"--amp", "bf16"}).train.gradients.amp, AmpMode::Bf16);
  EXPECT_NE(config_json(parse_ok({"--amp", "bf16"})).find(R"("amp":"bf16")"), std::string::npos);
  EXPECT_NE(parse_error({"--amp", "fp8"}).find("--amp"), std::string::npos);
}

// What the resolved device cannot run: checked on this (GPU-less) machine by passing the device.
std::string device_error(std::vector<std::string> args, Device device,
                         bool thread_multiple = true) {
  const Config c = parse_ok(std::move(args));
  try {
    check_flags_for_device(c, device, thread_multiple);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Cli, FlagCombinationsTheDeviceCannotRunNameTheFlags) {
  const auto gpu = Device::Cuda, cpu = Device::Cpu;
  const auto has = [](const std::string& m, const char* what) {
    return m.find(what) != std::string::npos;
  };
  EXPECT_TRUE(has(device_error({"--compression", "powersgd"}, gpu), "--compression powersgd"));
  EXPECT_TRUE(has(device_error({"--compression", "fp16", "--comm", "mpi"}, gpu), "--comm nccl"));
  EXPECT_TRUE(has(device_error({"--overlap-engine", "thread"}, gpu), "--overlap-engine thread"));
  EXPECT_TRUE(has(device_error({"--overlap-engine", "thread"}, cpu, false), "MPI_THREAD_MULTIPLE"));
  EXPECT_TRUE(has(device_error({"--overlap-engine", "thread", "--local-sgd-start", "3"}, cpu),
                  "--local-sgd-start"));
  EXPECT_TRUE(has(device_error({"--amp", "fp16", "--device", "cpu"}, cpu), "--amp fp16"));
  EXPECT_TRUE(has(device_error({"--amp", "fp16"}, cpu), "--device auto found no usable GPU"));
  EXPECT_TRUE(has(device_error({"--amp", "bf16", "--cpu-kernels", "reference"}, cpu),
                  "drop --cpu-kernels reference"));
  EXPECT_TRUE(has(device_error({"--local-sgd-start", "3", "--comm", "mpi"}, gpu), "--comm nccl"));
  EXPECT_TRUE(has(device_error({"--local-sgd-start", "3", "--compression", "bf16"}, cpu),
                  "--compression bf16"));
  EXPECT_TRUE(has(device_error({"--comm", "nccl"}, cpu), "--comm nccl works on GPU memory"));
  EXPECT_TRUE(has(device_error({"--gpu-kernels", "own", "--device", "cpu"}, cpu),
                  "--gpu-kernels own chooses a GPU kernel"));
  EXPECT_TRUE(
      has(device_error({"--gpu-kernels", "own"}, cpu), "--device auto found no usable GPU"));
  // What each device does run passes.
  for (const auto& ok : std::vector<std::vector<std::string>>{{"--compression", "fp16"},
                                                              {"--amp", "fp16"},
                                                              {"--sync-bn"},
                                                              {"--local-sgd-start", "3"},
                                                              {"--gpu-kernels", "own"}})
    EXPECT_EQ(device_error(ok, gpu), "") << ok[0];
  for (const auto& ok : std::vector<std::vector<std::string>>{
           {"--compression", "powersgd"},
           {"--overlap-engine", "thread"},
           {"--sync-bn"},
           {"--amp", "bf16"}})  // the CPU's bf16 units are checked by the backend (amp_test)
    EXPECT_EQ(device_error(ok, cpu), "") << ok[0];
}

TEST(Cli, RejectionsNameTheFlag) {
  EXPECT_NE(parse_error({"--bogus"}).find("--bogus"), std::string::npos);
  EXPECT_NE(parse_error({"--batch-size", "0"}).find("--batch-size"), std::string::npos);
  EXPECT_NE(parse_error({"--lr", "-1"}).find("--lr"), std::string::npos);
  EXPECT_NE(parse_error({"--device", "tpu"}).find("--device"), std::string::npos);
  EXPECT_NE(parse_error({"--epochs", "x"}).find("--epochs"), std::string::npos);
  EXPECT_NE(parse_error({"--nesterov", "--momentum", "0"}).find("--nesterov"), std::string::npos);
  EXPECT_NE(parse_error({"--bogus"}).find("--help"), std::string::npos);
  // --clear-logs starts a new run's files empty; a resumed run keeps the records it continues.
  EXPECT_NE(parse_error({"--clear-logs", "--resume", "auto"}).find("drop --clear-logs"),
            std::string::npos);
  EXPECT_TRUE(parse_ok({"--clear-logs"}).clear_logs);
  // A model to evaluate or start from, and not two ways to begin at once.
  EXPECT_NE(parse_error({"--eval-only"}).find("--eval-only evaluates a checkpoint"),
            std::string::npos);
  EXPECT_NE(parse_error({"--init-weights", "a.h5", "--resume", "auto"})
                .find("--init-weights starts a new run"),
            std::string::npos);
  EXPECT_NE(parse_error({"--init-weights", "a.h5", "--eval-only", "--resume", "b.h5"})
                .find("use --eval-only --resume PATH"),
            std::string::npos);
  EXPECT_TRUE(parse_ok({"--eval-only", "--resume", "auto"}).eval_only);
  EXPECT_EQ(parse_ok({"--init-weights", "a.h5"}).init_weights, "a.h5");
  // --gpu-kernels: its names, and own only where TF32 is allowed and no 16-bit copies run.
  EXPECT_EQ(parse_ok({"--gpu-kernels", "own"}).backend.gpu_kernels, GpuKernels::Own);
  EXPECT_EQ(parse_ok({}).backend.gpu_kernels, GpuKernels::Cudnn);
  EXPECT_NE(parse_error({"--gpu-kernels", "triton"}).find("--gpu-kernels"), std::string::npos);
  EXPECT_NE(parse_error({"--gpu-kernels", "own", "--tf32", "off"}).find("drop --tf32 off"),
            std::string::npos);
  EXPECT_NE(parse_error({"--gpu-kernels", "own", "--amp", "bf16"}).find("with --amp bf16"),
            std::string::npos);
}

// Every floating-point flag, found the way a user finds them (--help-all's FLOAT type), refuses
// NaN, the infinities and values that overflow to one, naming the flag, on the command line and
// in --config's TOML (whose nan/inf literals CLI11 hands over as text). The set from --help-all
// is checked against the stored configuration's float values, so a float flag whose help hides
// its type is not skipped silently.
TEST(Cli, EveryFloatFlagRefusesNonFiniteValues) {
  const std::string all = help_text(true);
  std::set<std::string> floats;
  const std::regex float_flag(R"((--[a-z0-9-]+) FLOAT)");
  for (auto it = std::sregex_iterator(all.begin(), all.end(), float_flag);
       it != std::sregex_iterator(); ++it) {
    floats.insert((*it)[1].str());
  }
  std::set<std::string> stored_floats;
  const nlohmann::json stored = nlohmann::json::parse(config_json(Config{}));
  for (const auto& [key, value] : stored.items()) {
    if (!value.is_number_float()) continue;
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    stored_floats.insert(flag);
  }
  EXPECT_EQ(floats, stored_floats);
  ASSERT_GE(floats.size(), 9u);  // lr, momentum, ..., the straggler threshold: at least these
  const std::filesystem::path toml =
      std::filesystem::temp_directory_path() / ("cli_test_finite_" + std::to_string(getpid()));
  for (const std::string& flag : floats) {
    for (const char* bad : {"nan", "NaN", "-nan", "inf", "-inf", "infinity", "1e400", "-1e999"}) {
      const std::string e = parse_error({flag, bad});
      EXPECT_NE(e.find(flag + ": must be a finite number (got " + bad), std::string::npos)
          << flag << " " << bad << ": " << e;
    }
    for (const char* bad : {"nan", "inf", "-inf", "1e400"}) {
      {
        std::ofstream f(toml);
        f << flag.substr(2) << " = " << bad << "\n";
      }
      const std::string e = parse_error({"--config", toml.string()});
      EXPECT_NE(e.find(flag + ": must be a finite number"), std::string::npos)
          << flag << " = " << bad << " in --config: " << e;
      EXPECT_NE(e.find(toml.string()), std::string::npos) << e;
    }
  }
  std::filesystem::remove(toml);
  // Finite values at the edges still parse: the largest double, an underflow to 0.
  EXPECT_EQ(parse_ok({"--collective-timeout", "1e-400"}).collective_timeout, 0.0);
  EXPECT_DOUBLE_EQ(parse_ok({"--lr", "1e300"}).train.optimizer.lr.base_lr, 1e300);
}

TEST(Cli, TraceFlagsParseAndTheirMistakesNameTheFlag) {
  const Config c = parse_ok({"--trace", "t.json", "--trace-steps", "3:9"});
  EXPECT_EQ(c.trace, "t.json");
  EXPECT_EQ(c.trace_steps, "3:9");
  EXPECT_TRUE(parse_ok({}).trace.empty());
  EXPECT_NE(
      parse_error({"--trace", "t.json", "--trace-steps", "9"}).find("--trace-steps 9: give A:B"),
      std::string::npos);
  EXPECT_NE(parse_error({"--trace", "t.json", "--trace-steps", "4:4"}).find("0 <= A < B"),
            std::string::npos);
  EXPECT_NE(parse_error({"--trace-steps", "1:2"}).find("add --trace FILE"), std::string::npos);
}

TEST(Cli, AccumulateParsesAndItsMistakesNameIt) {
  EXPECT_EQ(parse_ok({"--accumulate", "4"}).train.schedule.accumulate, 4);
  EXPECT_EQ(parse_ok({}).train.schedule.accumulate, 1);
  for (const char* bad : {"0", "-1", "x", "2.5", "5000"}) {
    EXPECT_NE(parse_error({"--accumulate", bad}).find("--accumulate"), std::string::npos) << bad;
  }
  EXPECT_NE(parse_error({"--accumulate", "2", "--eval-only", "--resume", "auto"})
                .find("--eval-only trains nothing"),
            std::string::npos);
  EXPECT_NE(parse_error({"--batch-size", "65536", "--accumulate", "4096"})
                .find("images per rank per step is more than any dataset holds"),
            std::string::npos);
}

// The actions of one invocation, and the combinations with nothing to do.
TEST(Cli, DryRunWriteConfigAndKeepBestParseAndTheirMistakesNameThem) {
  EXPECT_TRUE(parse_ok({"--dry-run"}).dry_run);
  EXPECT_EQ(parse_ok({"--write-config", "r.toml"}).write_config, "r.toml");
  EXPECT_TRUE(parse_ok({"--keep-best"}).train.checkpoint.keep_best);
  EXPECT_EQ(parse_ok({"--resume", "best"}).resume, "best");
  EXPECT_NE(parse_error({"--dry-run", "--write-config", "r.toml"})
                .find("--dry-run checks a run before it trains; --write-config trains nothing"),
            std::string::npos);
  EXPECT_NE(parse_error({"--dry-run", "--verify-checkpoints"}).find("--verify-checkpoints"),
            std::string::npos);
  EXPECT_NE(parse_error({"--keep-best", "--eval-only", "--resume", "best"})
                .find("--eval-only --resume best evaluates the kept one"),
            std::string::npos);
  EXPECT_NE(parse_error({"--write-config"}).find("--write-config"), std::string::npos);
}

TEST(Cli, StragglerFlagsParseAndTheirMistakesNameTheFlag) {
  const Config d = parse_ok({});
  EXPECT_EQ(d.train.cadence.straggler_every, -1);  // the --log-every window
  EXPECT_DOUBLE_EQ(d.train.cadence.straggler_threshold, 0.7);
  const Config c = parse_ok(
      {"--straggler-every", "0", "--straggler-threshold", "0.5", "--debug-slow", "1:backward:200"});
  EXPECT_EQ(c.train.cadence.straggler_every, 0);
  EXPECT_DOUBLE_EQ(c.train.cadence.straggler_threshold, 0.5);
  EXPECT_NE(config_json(c).find(R"("straggler_threshold":0.5)"), std::string::npos);
  for (const char* bad : {"-2", "x", "1.5"}) {
    EXPECT_NE(parse_error({"--straggler-every", bad}).find("--straggler-every"), std::string::npos)
        << bad;
  }
  for (const char* bad : {"0", "1.5", "-0.7", "x"}) {
    EXPECT_NE(parse_error({"--straggler-threshold", bad}).find("--straggler-threshold"),
              std::string::npos)
        << bad;
  }
  for (const char* bad : {"1:comm:5", "1:backward", "x:data:5", "1:data:0", "1:lunch:5"}) {
    EXPECT_NE(parse_error({"--debug-slow", bad})
                  .find("--debug-slow: got " + std::string(bad) + "; give RANK:PHASE:MS"),
              std::string::npos)
        << bad;
  }
}

// --help lists the flags in groups a user reads by topic; the test seams (the failures the suite
// injects) only under --help-all.
TEST(Cli, HelpGroupsTheFlagsAndHidesTheTestSeams) {
  const std::string help = help_text(), all = help_text(true);
  for (const char* group :
       {"\nConfiguration and checks:\n", "\nTraining:\n", "\nData:\n", "\nDistributed:\n",
        "\nCheckpoints:\n", "\nLogging and observability:\n", "\nGPU:\n", "\nCPU:\n"}) {
    EXPECT_NE(help.find(group), std::string::npos) << group;
  }
  EXPECT_NE(help.find("--help-all"), std::string::npos);
  for (const char* seam : {"--debug-hang-rank", "--debug-exit-rank", "--debug-desync-rank",
                           "--debug-sample-log", "--debug-slow", "--debug-fail-capture"}) {
    EXPECT_EQ(help.find(seam), std::string::npos) << seam << " shown by --help";
    EXPECT_NE(all.find(seam), std::string::npos) << seam << " missing from --help-all";
  }
  EXPECT_NE(all.find("\nTest seams (the failures the test suite injects):\n"), std::string::npos);
  // A debugging aid for users stays in --help.
  EXPECT_NE(help.find("--debug-collectives"), std::string::npos);
}

TEST(Cli, DocsDocumentEveryFlag) {
  std::ifstream f("docs/flags.md");
  ASSERT_TRUE(f) << "run from the repository root";
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string readme = ss.str();
  const std::string help = help_text(true);
  // Option lines of the help table: "  --name ..." or "  -h,--help ...".
  const std::regex flag("\\n  (?:-[a-z],)?(--[a-z][a-z0-9-]+)");
  int n = 0;
  for (std::sregex_iterator it(help.begin(), help.end(), flag), end; it != end; ++it) {
    const std::string name = (*it)[1];
    ++n;
    EXPECT_NE(readme.find("`" + name), std::string::npos)
        << name << " is not documented in docs/flags.md";
  }
  EXPECT_GT(n, 20);
}

// The stored configuration (logged, in metrics.jsonl and every checkpoint; what resume compares)
// comes from the option table itself: every flag of --help is in it under its own name (--a-b as
// "a_b"), with the value as typed; nothing else is.
TEST(Cli, StoredConfigurationHoldsEveryFlagAsTyped) {
  const std::string help = help_text(true);
  const std::regex flag("\\n  (?:-[a-z],)?(--[a-z][a-z0-9-]+)");
  const nlohmann::json stored = nlohmann::json::parse(config_json(Config{}));
  std::set<std::string> keys;
  for (std::sregex_iterator it(help.begin(), help.end(), flag), end; it != end; ++it) {
    std::string name = std::string((*it)[1]).substr(2);
    // They act, they configure nothing (--clear-logs acts on this run's start only: a resumed
    // run or a --config written from this one must not inherit it).
    if (name == "help" || name == "help-all" || name == "version" || name == "config" ||
        name == "write-config" || name == "dry-run" || name == "clear-logs")
      continue;
    std::replace(name.begin(), name.end(), '-', '_');
    keys.insert(name);
    EXPECT_TRUE(stored.contains(name)) << "--" << (*it)[1] << " is missing from config_json";
  }
  EXPECT_EQ(keys.size(), stored.size()) << stored.dump();
  EXPECT_GT(keys.size(), 60u);
  const nlohmann::json j = nlohmann::json::parse(
      config_json(parse_ok({"--no-shuffle", "--requeue-signal", "HUP", "--tf32", "off",
                            "--eval-only", "--resume", "auto", "--progress", "on", "--debug-slow",
                            "1:data:5", "--init-weights", "", "--data", "d", "--seed", "7"})));
  EXPECT_EQ(j["no_shuffle"], true);
  EXPECT_FALSE(j.contains("shuffle"));
  EXPECT_EQ(j["requeue_signal"], "HUP");
  EXPECT_EQ(j["flight_dump_signal"], "USR2");
  EXPECT_EQ(j["tf32"], "off");
  EXPECT_EQ(j["eval_only"], true);
  EXPECT_EQ(j["resume"], "auto");
  EXPECT_EQ(j["progress"], "on");
  EXPECT_EQ(j["debug_slow"], "1:data:5");
  EXPECT_EQ(j["data"], "d");
  EXPECT_EQ(j["seed"], 7);
  EXPECT_EQ(j["batch_size"], 100);
}

// What a user reads to reproduce a run reproduces it: the stored configuration written back as a
// command line parses to the same configuration.
TEST(Cli, StoredConfigurationIsACommandLine) {
  const Config first = parse_ok({"--no-shuffle",
                                 "--lr",
                                 "0.05",
                                 "--lr-schedule",
                                 "cosine",
                                 "--compression",
                                 "fp16",
                                 "--sync-bn",
                                 "--requeue-signal",
                                 "USR2",
                                 "--flight-dump-signal",
                                 "HUP",
                                 "--cuda-graphs",
                                 "off",
                                 "--seed",
                                 "18446744073709551615",
                                 "--trace",
                                 "t.json",
                                 "--trace-steps",
                                 "3:9",
                                 "--local-sgd-start",
                                 "4"});
  const nlohmann::json stored = nlohmann::json::parse(config_json(first));
  std::vector<std::string> args;
  for (const auto& [key, value] : stored.items()) {
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (value.is_boolean()) {
      if (value.get<bool>()) args.push_back(flag);
    } else if (value.is_string()) {
      if (value.get<std::string>().empty()) continue;  // the flag's default: nothing typed
      args.push_back(flag);
      args.push_back(value.get<std::string>());
    } else {
      args.push_back(flag);
      args.push_back(value.dump());
    }
  }
  EXPECT_EQ(nlohmann::json::parse(config_json(parse_ok(args))), stored);
  EXPECT_EQ(stored["seed"], 18446744073709551615ull);
}

}  // namespace
}  // namespace mnist_ddp

namespace mnist_ddp {
namespace {

// Each enum is named in one table; every name maps back to its value and no name repeats, so the
// parser, --help, config_json and the logs cannot drift apart.
template <class E, std::size_t N>
void expect_bijective(const std::array<NameOf<E>, N>& table, std::size_t values) {
  EXPECT_EQ(N, values);
  std::set<std::string_view> names;
  std::set<int> seen;
  for (const auto& entry : table) {
    EXPECT_TRUE(names.insert(entry.name).second) << entry.name;
    EXPECT_TRUE(seen.insert(static_cast<int>(entry.value)).second) << entry.name;
    EXPECT_EQ(value_in(table, entry.name), entry.value) << entry.name;
    EXPECT_EQ(std::string_view(name_in(table, entry.value)), entry.name);
  }
  EXPECT_FALSE(value_in(table, "no-such-name").has_value());
}

TEST(Cli, EveryEnumHasOneNameTable) {
  expect_bijective(kLrScheduleNames, 3);
  expect_bijective(kTrackNames, 2);
  expect_bijective(kDeviceNames, 2);
  expect_bijective(kDeviceChoiceNames, 3);
  expect_bijective(kCpuKernelsNames, 2);
  expect_bijective(kGpuKernelsNames, 2);
  expect_bijective(kCommChoiceNames, 3);
  expect_bijective(kProgressNames, 3);
  expect_bijective(kAmpModeNames, 3);
  expect_bijective(kCompressionNames, 6);
  expect_bijective(kOverlapEngineNames, 2);
  expect_bijective(kOnOffNames, 2);
  expect_bijective(kDTypeNames, 8);
  // The configuration logged and stored in checkpoints spells them from the same tables.
  Config c;
  c.train.gradients.compression = Compression::BatchedPowerSgdFp16;
  c.overlap_engine = OverlapEngine::Thread;
  const std::string j = config_json(c);
  EXPECT_NE(j.find("\"compression\":\"batched_powersgd_fp16\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"overlap_engine\":\"thread\""), std::string::npos) << j;
}

}  // namespace
}  // namespace mnist_ddp
