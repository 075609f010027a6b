// cli.cpp — the CLI11 option table (the single source of truth for flags and --help).
#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/app/flag_rules.hpp"
#include "mnist_ddp/train/test_seams.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/process/signals.hpp"
#include "mnist_ddp/trace/trace.hpp"

namespace mnist_ddp {
namespace {

constexpr const char* kTestSeamsGroup = "Test seams (the failures the test suite injects)";

// Range checks whose messages read well (CLI11's built-in ones print DBL_MAX as the bound).
// A non-number passes here and is then rejected by the type conversion with its own message.
bool parse_number(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return end != s.c_str() && *end == '\0';
}
const CLI::Validator kPositive(
    [](std::string& s) {
      double v = 0;
      return !parse_number(s, &v) || v > 0 ? std::string() : "must be > 0 (got " + s + ")";
    },
    "> 0", "positive");
const CLI::Validator kNonNegative(
    [](std::string& s) {
      double v = 0;
      return !parse_number(s, &v) || v >= 0 ? std::string() : "must be >= 0 (got " + s + ")";
    },
    ">= 0", "non-negative");

// Every floating-point flag, on the command line and in --config (CLI11 runs a flag's checks on a
// config file's value too): NaN passes every range check (each comparison with it is false) and
// an infinity (or a value beyond the largest double, which reads as one) means no setting, so
// both are refused by name. OptionTable::option adds it to each float flag: none can miss it.
const CLI::Validator kFinite(
    [](std::string& s) {
      double v = 0;
      if (!parse_number(s, &v) || std::isfinite(v)) return std::string();
      return "must be a finite number (got " + s +
             (std::isnan(v) || s.find_first_of("iI") != std::string::npos
                  ? ")"
                  : ", beyond the largest double)");
    },
    "", "finite");  // no --help text: every float flag has it

// Enum flags are parsed as checked strings (readable --help), then mapped onto Config; the text
// of a Config's values is what a user types for them (what config_json stores).
struct EnumText {
  explicit EnumText(const Config& c)
      : lr_schedule(name_in(kLrScheduleNames, c.lr_schedule)),
        device(name_in(kDeviceChoiceNames, c.device)),
        cpu_kernels(name_in(kCpuKernelsNames, c.cpu_kernels)),
        comm(name_in(kCommChoiceNames, c.comm)),
        tf32(name_in(kOnOffNames, c.tf32)),
        gpu_kernels(name_in(kGpuKernelsNames, c.gpu_kernels)),
        cuda_graphs(name_in(kOnOffNames, c.cuda_graphs)),
        amp(name_in(kAmpModeNames, c.amp)),
        compression(name_in(kCompressionNames, c.compression)),
        overlap_engine(name_in(kOverlapEngineNames, c.overlap_engine)),
        requeue_signal(signal_flag_name(c.requeue_signal)),
        flight_dump_signal(signal_flag_name(c.flight_dump_signal)),
        progress(name_in(kProgressNames, c.progress)),
        no_shuffle(!c.shuffle) {}
  std::string lr_schedule, device, cpu_kernels, comm, tf32, gpu_kernels, cuda_graphs, amp,
      compression, overlap_engine, requeue_signal, flight_dump_signal, progress;
  bool no_shuffle = false;
};

// --help's groups, in the order it lists them: each flag belongs to exactly one (a flag without a
// group is an internal error, caught by the unit tests). The test seams, the failures the tests
// inject, are hidden from --help and listed by --help-all.
struct FlagGroup {
  const char* name;
  std::vector<std::string> flags;
};
constexpr const char* kConfigurationGroup = "Configuration and checks";
const std::vector<FlagGroup>& flag_groups() {
  static const std::vector<FlagGroup> groups = {
      {kConfigurationGroup, {"--config", "--write-config", "--dry-run"}},
      {"Training",
       {"--epochs", "--max-steps", "--batch-size", "--accumulate", "--lr", "--momentum",
        "--dampening", "--weight-decay", "--nesterov", "--lr-schedule", "--lr-step-size",
        "--lr-gamma", "--warmup-steps", "--min-lr", "--seed"}},
      {"Data", {"--data", "--eval-batch-size", "--eval-every", "--drop-last", "--no-shuffle"}},
      {"Distributed",
       {"--comm", "--bucket-cap-kb", "--compression", "--powersgd-rank", "--powersgd-start-iter",
        "--powersgd-min-compression-rate", "--sync-bn", "--local-sgd-start", "--local-sgd-period",
        "--no-overlap", "--overlap-engine", "--check-replicas", "--collective-timeout"}},
      {"Checkpoints",
       {"--checkpoint-dir", "--checkpoint-every", "--keep", "--keep-best", "--resume",
        "--init-weights", "--eval-only", "--verify-checkpoints", "--requeue-signal", "--requeue"}},
      {"Logging and observability",
       {"--log-dir", "--clear-logs", "--log-every", "--progress", "--print-env",
        "--straggler-every", "--straggler-threshold", "--debug-collectives", "--flight-recorder",
        "--flight-dump-signal", "--trace", "--trace-steps"}},
      {"GPU", {"--device", "--tf32", "--gpu-kernels", "--cuda-graphs", "--amp"}},
      {"CPU", {"--cpu-kernels", "--threads"}},
      {kTestSeamsGroup,
       {"--debug-hang-rank", "--debug-exit-rank", "--debug-desync-rank", "--debug-sample-log",
        "--debug-slow", "--debug-fail-capture"}},
  };
  return groups;
}

// The option table: every flag goes to CLI11 (parsing, --help under its group) and to the stored
// configuration (config_json: each flag under its own name, --a-b as "a_b", with its value as
// typed; config_toml: the same under the flag's own name), from the one call that declares it.
// An action (what an invocation does instead of training: --dry-run, --write-config) is parsed
// and listed by --help, never stored, and refused in a config file.
class OptionTable {
 public:
  explicit OptionTable(CLI::App& app) : app_(app) {}
  template <class T>
  CLI::Option* option(const std::string& name, T& v, const std::string& help) {
    CLI::Option* o = app_.add_option(name, v, help)->group(group_of(name));
    // First, before the flag's own range checks (their messages would compare with NaN).
    if constexpr (std::is_floating_point_v<T>) o->check(kFinite);
    stored_.push_back(Stored{name, key_of(name), o, [&v] { return nlohmann::json(v); }});
    return o;
  }
  CLI::Option* flag(const std::string& name, bool& v, const std::string& help) {
    CLI::Option* o = app_.add_flag(name, v, help)->group(group_of(name));
    stored_.push_back(Stored{name, key_of(name), o, [&v] { return nlohmann::json(v); }});
    return o;
  }
  template <class T>
  CLI::Option* action(const std::string& name, T& v, const std::string& help) {
    CLI::Option* o = nullptr;
    if constexpr (std::is_same_v<T, bool>) {
      o = app_.add_flag(name, v, help);
    } else {
      o = app_.add_option(name, v, help);
    }
    return o->group(group_of(name))->configurable(false);
  }
  // --config FILE: CLI11's own TOML reader; a key that is no flag is an error, not ignored.
  void config_file(const std::string& help) {
    app_.set_config("--config", "", help)->type_name("FILE")->group(group_of("--config"));
    app_.allow_config_extras(CLI::config_extras_mode::error);
  }
  CLI::App& app() { return app_; }
  struct Stored {
    std::string name;  // "--batch-size"
    std::string key;   // "batch_size"
    CLI::Option* option;
    std::function<nlohmann::json()> value;
  };
  const std::vector<Stored>& stored() const { return stored_; }
  nlohmann::json values() const {
    nlohmann::json j = nlohmann::json::object();
    for (const Stored& s : stored_) j[s.key] = s.value();
    return j;
  }
  // The flags the command line or the config file set.
  nlohmann::json given() const {
    nlohmann::json j = nlohmann::json::object();
    for (const Stored& s : stored_) {
      if (s.option->count() > 0) j[s.key] = s.value();
    }
    return j;
  }
  // "--batch-size" -> "batch_size" (config_json's key).
  static std::string key_of(std::string name) {
    name.erase(0, name.find_first_not_of('-'));
    std::replace(name.begin(), name.end(), '-', '_');
    return name;
  }

 private:
  std::string group_of(const std::string& name) const {
    for (const FlagGroup& g : flag_groups()) {
      if (std::find(g.flags.begin(), g.flags.end(), name) == g.flags.end()) continue;
      return g.name;
    }
    MNIST_DDP_CHECK(false, "flag " + name + " has no --help group (cli.cpp: flag_groups)");
    return "";
  }
  CLI::App& app_;
  std::vector<Stored> stored_;
};

void build(OptionTable& o, Config& c, EnumText& t) {
  CLI::App& app = o.app();
  app.set_version_flag("--version", std::string("mnist_ddp ") + kVersion);
  app.set_help_all_flag("--help-all", "every flag, the test suite's seams (--debug-*) included");
  app.option_defaults()->always_capture_default();
  // A flag given twice takes the last value, so job scripts can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  o.config_file(
      "read flags from this TOML file: each line `name = value`, the name a flag's without its "
      "dashes (batch-size = 200, data = \"/scratch/mnist\", sync-bn = true); flags on the "
      "command line override it; --write-config FILE writes one");
  o.action("--write-config", c.write_config,
           "write this run's configuration (every flag, the file's and the command line's) to "
           "FILE as TOML for --config, and exit without training; with --resume PATH|auto|best "
           "the configuration stored in that checkpoint (flags given here override it)")
      ->type_name("FILE");
  o.action("--dry-run", c.dry_run,
           "make every check a run makes before its first step (flags, data, the checkpoint "
           "directory's lock and writability, launcher, devices, communicators, --resume), print "
           "the plan (steps, batches per rank, checkpoints, where outputs go) and exit 0; "
           "nothing is written but the log (mnist_train.log)");
  o.option("--data", c.data_dir,
           "directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]");
  o.option("--epochs", c.epochs, "passes over the training set")->check(kPositive);
  o.option("--max-steps", c.max_steps, "stop after this many optimizer steps (0: no limit)")
      ->check(kNonNegative);
  o.option("--batch-size", c.batch_size,
           "images per rank per step (per micro-batch with --accumulate)")
      ->check(CLI::Range(1, 65536));
  o.option("--accumulate", c.accumulate,
           "micro-batches of --batch-size per rank in one optimizer step: gradients add up "
           "locally and are all-reduced once, on the last (DDP's no_sync); steps, the LR "
           "schedule, --max-steps and the checkpoint/log cadences count optimizer steps")
      ->check(CLI::Range(1, 4096));
  o.option("--eval-batch-size", c.eval_batch_size, "images per rank per evaluation batch")
      ->check(CLI::Range(1, 65536));
  o.option("--lr", c.lr, "base learning rate")->check(kNonNegative);
  o.option("--momentum", c.momentum, "SGD momentum (0 disables)")->check(CLI::Range(0.0, 1.0));
  o.option("--dampening", c.dampening, "SGD dampening")->check(CLI::Range(0.0, 1.0));
  o.option("--weight-decay", c.weight_decay, "L2 penalty added to the gradient")
      ->check(kNonNegative);
  o.flag("--nesterov", c.nesterov, "Nesterov momentum (needs --momentum > 0, dampening 0)");
  o.option("--lr-schedule", t.lr_schedule, "constant | step | cosine")
      ->check(CLI::IsMember(names_in(kLrScheduleNames)));
  o.option("--lr-step-size", c.lr_step_size, "step schedule: epochs between decays")
      ->check(kPositive);
  o.option("--lr-gamma", c.lr_gamma, "step schedule: decay factor")->check(kNonNegative);
  o.option("--warmup-steps", c.warmup_steps, "linear warm-up steps (0: none)")->check(kNonNegative);
  o.option("--min-lr", c.min_lr, "cosine schedule: final learning rate")->check(kNonNegative);
  o.option("--seed", c.seed, "seed for initial weights and the shuffle");
  o.option("--eval-every", c.eval_every, "also evaluate every N steps (0: epoch ends only)")
      ->check(kNonNegative);
  o.flag("--drop-last", c.drop_last,
         "drop the tail of the training set that does not divide by the world size "
         "(default: pad by repeating the head)");
  o.flag("--no-shuffle", t.no_shuffle, "visit training images in file order");
  o.option("--device", t.device, "cpu | cuda | auto (cuda when a GPU is visible)")
      ->check(CLI::IsMember(names_in(kDeviceChoiceNames)));
  o.option("--cpu-kernels", t.cpu_kernels,
           "CPU backend: onednn (fast) | reference (im2col + OpenBLAS, the test oracle)")
      ->check(CLI::IsMember(names_in(kCpuKernelsNames)));
  o.option("--comm", t.comm,
           "auto (nccl on cuda, mpi on cpu) | nccl | mpi (host-staged; lets ranks share a GPU)")
      ->check(CLI::IsMember(names_in(kCommChoiceNames)));
  o.option("--tf32", t.tf32, "on | off: TF32 tensor cores for GPU convolutions and GEMMs")
      ->check(CLI::IsMember(names_in(kOnOffNames)));
  o.option("--gpu-kernels", t.gpu_kernels,
           "cudnn | own: on a GPU, layer2's weight gradient by cuDNN, or by this project's "
           "deterministic TF32 tensor-core kernel (experimental: not yet run on a GPU)")
      ->check(CLI::IsMember(names_in(kGpuKernelsNames)));
  o.option("--cuda-graphs", t.cuda_graphs,
           "on | off: on a GPU with NCCL, capture the training step in a CUDA graph once "
           "per batch size and replay it (off: launch every kernel each step)")
      ->check(CLI::IsMember(names_in(kOnOffNames)));
  o.option("--amp", t.amp,
           "off | fp16 | bf16: mixed precision: convolutions and fc GEMMs in 16 bits with fp32 "
           "accumulation and fp32 master weights; fp16 (GPU) with a dynamic loss scale (65536, "
           "x2 after 2000 clean steps, x0.5 and the step skipped on inf/NaN on any rank); bf16 "
           "on a GPU, or on a CPU with AVX512-BF16 or AMX (oneDNN's bf16 kernels)")
      ->check(CLI::IsMember(names_in(kAmpModeNames)));
  o.option("--threads", c.threads, "BLAS threads per rank (0: usable cores / ranks on this node)")
      ->check(CLI::Range(0, 1024));
  o.option("--log-dir", c.log_dir,
           "rank 0 writes mnist_train.log and metrics.jsonl here, after the records of earlier "
           "runs in it (tools/compare_runs reads each run apart); one running job at a time "
           "(a second is refused; --dry-run and --eval-only beside it print to the console only)");
  // An action, not a setting: a resumed or requeued run (or a --config written from this one)
  // must never inherit it and empty the records of the run it continues.
  o.action("--clear-logs", c.clear_logs,
           "empty --log-dir's mnist_train.log and metrics.jsonl before this new run writes them "
           "(default: append after the earlier runs' records; not with --resume)");
  o.option("--checkpoint-dir", c.checkpoint_dir,
           "HDF5 checkpoints go here (checked writable before training)");
  o.option("--checkpoint-every", c.checkpoint_every,
           "also checkpoint every N steps (0: epoch ends and the end only)")
      ->check(kNonNegative);
  o.option("--keep", c.keep, "keep the newest K checkpoints")->check(CLI::Range(1, 1000000));
  o.flag("--keep-best", c.keep_best,
         "also keep the checkpoint with the best test top-1 so far as --checkpoint-dir/"
         "ckpt-best.h5, out of the --keep rotation (an evaluation that beats it is checkpointed)");
  o.option("--resume", c.resume,
           "none | auto (newest valid checkpoint in --checkpoint-dir, else start fresh) | best "
           "(--checkpoint-dir/ckpt-best.h5, from --keep-best) | PATH of one checkpoint");
  o.option("--log-every", c.log_every, "steps between progress lines in batch output")
      ->check(kPositive);
  o.option("--straggler-every", c.straggler_every,
           "steps per straggler window: each rank's compute time (its step minus its waits "
           "for the others) is compared across ranks once a window, one small all-gather "
           "(-1: --log-every; 0: off)")
      ->check(CLI::Range(std::int64_t{-1}, std::int64_t{1} << 40));
  o.option("--straggler-threshold", c.straggler_threshold,
           "a rank whose score (the fastest rank's compute / its own) stays below this for "
           "two windows is named as a straggler")
      ->check(CLI::Range(0.01, 1.0));
  o.option("--check-replicas", c.check_replicas,
           "every N steps compare a hash of the parameters across ranks (0: off)")
      ->check(kNonNegative);
  o.option("--bucket-cap-kb", c.bucket_cap_kb,
           "gradient bucket size in KiB (reverse layer order; 25 gives this model 3 buckets)")
      ->check(CLI::Range(1, 1 << 20));
  o.option("--compression", t.compression,
           "gradient communication hook: none | fp16 | bf16 (divide by world size, 16-bit sum) | "
           "powersgd | powersgd_fp16 | batched_powersgd_fp16 (low-rank, error feedback; CPU "
           "backend)")
      ->check(CLI::IsMember(names_in(kCompressionNames)));
  o.option("--powersgd-rank", c.powersgd_rank, "PowerSGD: rank of the low-rank approximation")
      ->check(CLI::Range(1, 1024));
  o.option("--powersgd-start-iter", c.powersgd_start_iter,
           "PowerSGD: plain all-reduce for the steps before this one")
      ->check(kNonNegative);
  o.option("--powersgd-min-compression-rate", c.powersgd_min_compression_rate,
           "PowerSGD: compress a matrix only if this many times fewer elements travel")
      ->check(CLI::Range(0.0, 1e6));
  o.flag("--sync-bn", c.sync_bn,
         "SyncBatchNorm: batch statistics (and their gradients) over the union of all "
         "ranks' batches instead of each rank's own (on a GPU exchanged through the host, "
         "without CUDA graphs)");
  o.option("--local-sgd-start", c.local_sgd_start,
           "post-local SGD: global gradient all-reduce for this many steps, then only "
           "within each node, with a global parameter average every --local-sgd-period "
           "steps (-1: off)")
      ->check(CLI::Range(std::int64_t{-1}, std::numeric_limits<std::int64_t>::max()));
  o.option("--local-sgd-period", c.local_sgd_period,
           "post-local SGD: steps between global parameter averages")
      ->check(CLI::Range(std::int64_t{1}, std::numeric_limits<std::int64_t>::max()));
  o.flag("--no-overlap", c.no_overlap,
         "one all-reduce after backward instead of per-bucket all-reduces during it");
  o.option("--overlap-engine", t.overlap_engine,
           "CPU: how bucket all-reduces progress during backward: test (MPI_Iallreduce + "
           "MPI_Test from backward) | thread (a communication thread, blocking all-reduce)")
      ->check(CLI::IsMember(names_in(kOverlapEngineNames)));
  o.option("--collective-timeout", c.collective_timeout,
           "seconds any collective may stay in flight before a watchdog names it and aborts "
           "the whole job (0: no watchdog)")
      ->check(CLI::Range(0.0, 1e9));
  o.flag("--debug-collectives", c.debug_collectives,
         "before every collective, compare (sequence, op, count, dtype) across ranks and "
         "report the first mismatch (one small all-gather each: for debugging)");
  o.option("--debug-hang-rank", c.debug_hang_rank,
           "testing: this rank stops before step 3 as if stuck (the watchdog's test)")
      ->check(CLI::Range(-1, 1 << 20));
  o.option("--debug-exit-rank", c.debug_exit_rank,
           "testing: this rank exits with status 1 before step 3, without MPI_Finalize")
      ->check(CLI::Range(-1, 1 << 20));
  o.option("--debug-desync-rank", c.debug_desync_rank,
           "testing: this rank issues one collective its peers do not before step 3 (the "
           "desync test; needs --debug-collectives, which catches it)")
      ->check(CLI::Range(-1, 1 << 20));
  o.option("--flight-recorder", c.flight_recorder,
           "collectives each communicator remembers (op, dtype, count, step, state, "
           "times); dumped to --log-dir/flight-rank<R>.json on a watchdog timeout, a "
           "desync, an error, SIGTERM/SIGINT or the --flight-dump-signal; read them with "
           "tools/flight_analyze (0: off)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 24));
  o.option("--flight-dump-signal", t.flight_dump_signal,
           "signal that dumps the flight recorder and keeps running (inspect a live hang: "
           "scancel --signal=USR2 JOBID, or kill -USR2 PID); USR1 | USR2 | HUP")
      ->check(CLI::IsMember({"USR1", "USR2", "HUP"}));
  o.option("--trace", c.trace,
           "write a timeline of the run to FILE (Chrome trace-event JSON for ui.perfetto.dev "
           "or chrome://tracing): per rank a compute and a communication track with each "
           "step, data, forward/backward per layer, every bucket's all-reduce, the "
           "optimizer, evaluation, checkpoints and stops; rank 0 writes it at the end");
  o.option("--trace-steps", c.trace_steps,
           "the steps --trace records, A:B = steps A to B-1 of the step counter (default: "
           "50 steps after 10 warm-up steps of this run)");
  o.option("--debug-sample-log", c.debug_sample_log,
           "testing: each rank appends the training-set indices it trains on, one per line, "
           "to DIR/samples-epoch<E>-rank<R>.txt (the data-split check)");
  o.option("--debug-slow", c.debug_slow,
           "testing: RANK:PHASE:MS makes that rank's PHASE (data, forward, backward, "
           "optimizer) MS milliseconds slower every step (the straggler tests)");
  o.flag("--debug-fail-capture", c.debug_fail_capture,
         "testing: every CUDA graph capture makes a call that is illegal while capturing, "
         "so the run must fall back to eager steps (the fallback's test)");
  o.option("--requeue-signal", t.requeue_signal,
           "signal that means \"preempted soon\": checkpoint at the next step boundary and "
           "stop (SIGTERM does too, and never requeues); USR1 | USR2 | TERM | HUP")
      ->check(CLI::IsMember({"USR1", "USR2", "TERM", "HUP"}));
  o.flag(
      "--requeue", c.requeue,
      "after a stop by the requeue signal (not SIGTERM: scancel cancels) under Slurm, rank 0 runs "
      "`scontrol requeue $SLURM_JOB_ID` so the job comes back and resumes (--resume "
      "auto); the preemption checkpoint is rolling: one per job");
  o.option("--init-weights", c.init_weights,
           "start training (step 0, fresh optimizer) from the model in this checkpoint: a "
           "full one, or weights only (tools/import_from_pytorch.py)");
  o.flag("--eval-only", c.eval_only,
         "evaluate the checkpoint given by --resume (PATH, or auto) on the test split, print "
         "top-1/top-5/loss and exit; no training, nothing written but the log");
  o.flag("--verify-checkpoints", c.verify_checkpoints,
         "load every checkpoint in --checkpoint-dir as --resume would (file CRC, HDF5 "
         "checksums, every member and shape, payload CRC, finite values), print one line "
         "each and exit: 0 when all pass, 2 when any fails; no training, nothing written");
  o.flag("--print-env", c.print_env, "print how rank, local rank and node were derived, then exit");
  o.option("--progress", t.progress, "live progress line: auto (on a TTY) | on | off")
      ->check(CLI::IsMember(names_in(kProgressNames)));
}

// --help without the test seams' group (--help-all shows it). The seams keep their group in the
// parser, not CLI11's hidden one, so an error about one still names the flag.
std::string without_test_seams(std::string help) {
  const std::string heading = std::string("\n") + kTestSeamsGroup + ":\n";
  const std::size_t at = help.find(heading);
  if (at == std::string::npos) return help;
  const std::size_t next = help.find("\n\n", at + heading.size());  // the next group, if any
  help.erase(at, next == std::string::npos ? std::string::npos : next - at);
  return help;
}

const char* kDescription =
    "mnist_ddp: data-parallel training of the MNIST ConvNet over MPI.\n"
    "Launch with `mpirun -np N ./mnist_ddp`, `srun --mpi=pmix ./mnist_ddp`, or alone.";

// The option table bound to its own copy of a configuration: what --help, config_json and the
// TOML reader and writer read and fill.
struct BoundTable {
  explicit BoundTable(const Config& from) : cfg(from), text(cfg), table(app) {
    build(table, cfg, text);
  }
  Config cfg;
  EnumText text;
  CLI::App app{kDescription, "mnist_ddp"};
  OptionTable table;
};

// The Config's enums from the text the parser admitted (only names of each table, so every
// lookup finds its value).
void apply_text(const EnumText& text, Config& cfg) {
  cfg.lr_schedule = *value_in(kLrScheduleNames, text.lr_schedule);
  cfg.device = *value_in(kDeviceChoiceNames, text.device);
  cfg.cpu_kernels = *value_in(kCpuKernelsNames, text.cpu_kernels);
  cfg.tf32 = *value_in(kOnOffNames, text.tf32);
  cfg.gpu_kernels = *value_in(kGpuKernelsNames, text.gpu_kernels);
  cfg.cuda_graphs = *value_in(kOnOffNames, text.cuda_graphs);
  cfg.amp = *value_in(kAmpModeNames, text.amp);
  cfg.compression = *value_in(kCompressionNames, text.compression);
  cfg.requeue_signal = parse_signal(text.requeue_signal);
  cfg.flight_dump_signal = parse_signal(text.flight_dump_signal);
  cfg.overlap_engine = *value_in(kOverlapEngineNames, text.overlap_engine);
  cfg.comm = *value_in(kCommChoiceNames, text.comm);
  cfg.progress = *value_in(kProgressNames, text.progress);
  cfg.shuffle = !text.no_shuffle;
}

// A TOML value CLI11's reader gives back exactly: numbers as JSON writes them (the shortest text
// that reads back to the same double), strings quoted. CLI11 2.1 cuts a value at '#' and reads no
// escapes, so a string with a '#', a line break or both kinds of quote cannot be written.
std::string toml_value(const std::string& name, const nlohmann::json& v) {
  if (!v.is_string()) return v.dump();
  const std::string s = v.get<std::string>();
  const bool dq = s.find('"') != std::string::npos, sq = s.find('\'') != std::string::npos;
  if (s.find_first_of("#\n\r") != std::string::npos || (dq && sq)) {
    throw UserError(fmt::format(
        "--write-config: the value of {} ('{}') cannot go into a config file (it holds a '#', a "
        "line break, or both kinds of quote); rename that path, or pass this flag on the command "
        "line instead of in the file",
        name, s));
  }
  return dq ? "'" + s + "'" : "\"" + s + "\"";
}

// The CLI11 error as the user's words: which flag or key, in which file, and the fix.
std::string parse_error_text(const CLI::ParseError& e, const std::string& config_path) {
  const std::string what = e.what();
  if (dynamic_cast<const CLI::FileError*>(&e) != nullptr) {
    return fmt::format(
        "--config {}: cannot read that file (no such file, or not readable); pass an existing "
        "TOML file (`mnist_ddp --write-config FILE` writes one)",
        config_path);
  }
  if (dynamic_cast<const CLI::ConfigError*>(&e) != nullptr) {
    const std::string prefix = "INI was not able to parse ";
    if (what.rfind(prefix, 0) == 0) {
      return fmt::format(
          "--config {}: unknown key '{}': no flag of mnist_ddp has that name (keys are the "
          "flags' names without the dashes, as `mnist_ddp --help` lists them)",
          config_path, what.substr(prefix.size()));
    }
    return fmt::format(
        "--config {}: {} (--write-config and --dry-run act on one invocation: "
        "pass them on the command line)",
        config_path, what);
  }
  if (!config_path.empty()) {
    return fmt::format(
        "command line or --config {}: {}. Run `mnist_ddp --help` for every flag and its values.",
        config_path, what);
  }
  return fmt::format("command line: {}. Run `mnist_ddp --help` for every flag.", what);
}

// A key given twice in a config file: CLI11 2.1 would keep the first value (or refuse a repeated
// true/false with "too many inputs"), not the last as on the command line, so it is refused by
// name. The file is read by CLI11's own TOML reader.
void check_config_keys(const std::string& path) {
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::FileError&) {
    return;  // the parser reports the unreadable file
  }
  std::map<std::string, int> seen;
  for (const CLI::ConfigItem& item : items) {
    // The reader merges a key repeated on the next line into one item of several values (no flag
    // here takes a list).
    if (++seen[item.fullname()] == 2 || item.inputs.size() > 1) {
      throw UserError(fmt::format(
          "--config {}: key '{}' is given twice; keep one (flags on the command line override "
          "the file's)",
          path, item.fullname()));
    }
  }
}

}  // namespace

ParseOutcome parse_cli(int argc, char** argv, Config& cfg, bool print, std::string* given) {
  BoundTable bound(cfg);
  CLI::App& app = bound.app;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (print) fmt::print("{}", without_test_seams(app.help()));
    return ParseOutcome::ExitOk;
  } catch (const CLI::CallForAllHelp&) {
    if (print) fmt::print("{}", app.help("", CLI::AppFormatMode::All));
    return ParseOutcome::ExitOk;
  } catch (const CLI::CallForVersion&) {
    if (print) fmt::print("mnist_ddp {}\n", kVersion);
    return ParseOutcome::ExitOk;
  } catch (const CLI::ParseError& e) {
    const CLI::Option* config = app.get_config_ptr();
    const bool from_file = config != nullptr && config->count() > 0;
    if (from_file) check_config_keys(config->as<std::string>());  // the likelier cause, named
    throw UserError(parse_error_text(e, from_file ? config->as<std::string>() : ""));
  }
  apply_text(bound.text, bound.cfg);
  if (const CLI::Option* config = app.get_config_ptr(); config != nullptr && config->count() > 0) {
    check_config_keys(config->as<std::string>());
  }
  // Paths need not be UTF-8 on Linux: invalid bytes become U+FFFD instead of an exception.
  if (given != nullptr) {
    *given = bound.table.given().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  check_flag_rules(bound.cfg);  // flag_rules.cpp: values and combinations refused, by table
  cfg = bound.cfg;
  return ParseOutcome::Run;
}

std::string config_toml(const Config& cfg) {
  const BoundTable bound(cfg);
  const OptionTable& table = bound.table;
  // The test seams' defaults, to write a seam only where it is set.
  const nlohmann::json values = table.values(), unset = BoundTable(Config{}).table.values();
  std::string out = fmt::format(
      "# mnist_ddp {} configuration: `mnist_ddp --config FILE` runs it (flags on the command "
      "line override it).\n# Each key is a flag of `mnist_ddp --help-all` without its dashes.\n",
      kVersion);
  for (const FlagGroup& g : flag_groups()) {
    std::string lines;
    for (const std::string& name : g.flags) {
      const std::string key = table.key_of(name);
      if (!values.contains(key)) continue;  // an action, or --config itself
      if (g.name == std::string(kTestSeamsGroup) && values[key] == unset[key]) continue;
      lines += fmt::format("{} = {}\n", name.substr(2), toml_value(name, values[key]));
    }
    if (!lines.empty()) out += fmt::format("\n# {}\n{}", g.name, lines);
  }
  return out;
}

Config config_from_json(const std::string& stored_json, const std::string& given,
                        std::vector<std::string>* unknown) {
  nlohmann::json merged = nlohmann::json::parse(stored_json, nullptr, false);
  if (merged.is_discarded() || !merged.is_object()) {
    throw UserError(
        "its stored configuration is not a JSON object (written by an older "
        "mnist_ddp): nothing to write");
  }
  const nlohmann::json over = nlohmann::json::parse(given.empty() ? "{}" : given);
  for (const auto& [key, value] : over.items()) merged[key] = value;
  BoundTable bound{Config{}};
  const OptionTable& table = bound.table;
  std::string toml;
  for (const auto& item : merged.items()) {
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
    const auto it = std::find_if(table.stored().begin(), table.stored().end(),
                                 [&](const OptionTable::Stored& s) { return s.key == key; });
    if (it == table.stored().end()) {
      if (unknown != nullptr) unknown->push_back(key);
      continue;
    }
    toml += fmt::format("{} = {}\n", it->name.substr(2), toml_value(it->name, value));
  }
  std::istringstream in(toml);
  try {
    bound.app.parse_from_stream(in);
  } catch (const CLI::ParseError& e) {
    throw UserError(fmt::format("its stored configuration does not parse: {}", e.what()));
  }
  apply_text(bound.text, bound.cfg);
  check_flag_rules(bound.cfg);
  return bound.cfg;
}

std::string help_text(bool all) {
  const BoundTable bound{Config{}};
  return all ? bound.app.help("", CLI::AppFormatMode::All) : without_test_seams(bound.app.help());
}

std::string config_json(const Config& cfg) {
  // The option table bound to a copy of this configuration: each flag's value as typed.
  // Paths need not be UTF-8 on Linux: invalid bytes become U+FFFD instead of an exception.
  return BoundTable(cfg).table.values().dump(-1, ' ', false,
                                             nlohmann::json::error_handler_t::replace);
}

}  // namespace mnist_ddp
