// cli.cpp — the CLI11 option table (the single source of truth for flags and --help).
#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/train/debug_seams.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <limits>
#include <map>

#include "mnist_ddp/runtime/check.hpp"
#include "mnist_ddp/runtime/signals.hpp"
#include "mnist_ddp/runtime/trace.hpp"

namespace mnist_ddp {
namespace {

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

// Enum flags are parsed as checked strings (readable --help), then mapped onto Config.
struct EnumText {
  std::string lr_schedule = name_in(kLrScheduleNames, LrSchedule::Constant);
  std::string device = name_in(kDeviceChoiceNames, DeviceChoice::Auto);
  std::string cpu_kernels = name_in(kCpuKernelsNames, CpuKernels::OneDnn);
  std::string comm = name_in(kCommChoiceNames, CommChoice::Auto);
  std::string tf32 = name_in(kOnOffNames, true);
  std::string cuda_graphs = name_in(kOnOffNames, true);
  std::string amp = name_in(kAmpModeNames, AmpMode::Off);
  std::string compression = name_in(kCompressionNames, Compression::None);
  std::string overlap_engine = name_in(kOverlapEngineNames, OverlapEngine::Test);
  std::string requeue_signal = "USR1";
  std::string flight_dump_signal = "USR2";
  std::string progress = name_in(kProgressNames, Progress::Auto);
};

void build(CLI::App& app, Config& c, EnumText& t) {
  app.set_version_flag("--version", std::string("mnist_ddp ") + kVersion);
  app.option_defaults()->always_capture_default();
  // A flag given twice takes the last value, so job scripts can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--data", c.data_dir,
                 "directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]");
  app.add_option("--epochs", c.epochs, "passes over the training set")->check(kPositive);
  app.add_option("--max-steps", c.max_steps, "stop after this many optimizer steps (0: no limit)")
      ->check(kNonNegative);
  app.add_option("--batch-size", c.batch_size,
                 "images per rank per step (per micro-batch with --accumulate)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--accumulate", c.accumulate,
                 "micro-batches of --batch-size per rank in one optimizer step: gradients add up "
                 "locally and are all-reduced once, on the last (DDP's no_sync); steps, the LR "
                 "schedule, --max-steps and the checkpoint/log cadences count optimizer steps")
      ->check(CLI::Range(1, 4096));
  app.add_option("--eval-batch-size", c.eval_batch_size, "images per rank per evaluation batch")
      ->check(CLI::Range(1, 65536));
  app.add_option("--lr", c.lr, "base learning rate")->check(kNonNegative);
  app.add_option("--momentum", c.momentum, "SGD momentum (0 disables)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--dampening", c.dampening, "SGD dampening")->check(CLI::Range(0.0, 1.0));
  app.add_option("--weight-decay", c.weight_decay, "L2 penalty added to the gradient")
      ->check(kNonNegative);
  app.add_flag("--nesterov", c.nesterov, "Nesterov momentum (needs --momentum > 0, dampening 0)");
  app.add_option("--lr-schedule", t.lr_schedule, "constant | step | cosine")
      ->check(CLI::IsMember(names_in(kLrScheduleNames)));
  app.add_option("--lr-step-size", c.lr_step_size, "step schedule: epochs between decays")
      ->check(kPositive);
  app.add_option("--lr-gamma", c.lr_gamma, "step schedule: decay factor")->check(kNonNegative);
  app.add_option("--warmup-steps", c.warmup_steps, "linear warm-up steps (0: none)")
      ->check(kNonNegative);
  app.add_option("--min-lr", c.min_lr, "cosine schedule: final learning rate")->check(kNonNegative);
  app.add_option("--seed", c.seed, "seed for initial weights and the shuffle");
  app.add_option("--eval-every", c.eval_every, "also evaluate every N steps (0: epoch ends only)")
      ->check(kNonNegative);
  app.add_flag("--drop-last", c.drop_last,
               "drop the tail of the training set that does not divide by the world size "
               "(default: pad by repeating the head)");
  app.add_flag("!--no-shuffle", c.shuffle, "visit training images in file order");
  app.add_option("--device", t.device, "cpu | cuda | auto (cuda when a GPU is visible)")
      ->check(CLI::IsMember(names_in(kDeviceChoiceNames)));
  app.add_option("--cpu-kernels", t.cpu_kernels,
                 "CPU backend: onednn (fast) | reference (im2col + OpenBLAS, the test oracle)")
      ->check(CLI::IsMember(names_in(kCpuKernelsNames)));
  app.add_option(
         "--comm", t.comm,
         "auto (nccl on cuda, mpi on cpu) | nccl | mpi (host-staged; lets ranks share a GPU)")
      ->check(CLI::IsMember(names_in(kCommChoiceNames)));
  app.add_option("--tf32", t.tf32, "on | off: TF32 tensor cores for GPU convolutions and GEMMs")
      ->check(CLI::IsMember(names_in(kOnOffNames)));
  app.add_option("--cuda-graphs", t.cuda_graphs,
                 "on | off: on a GPU with NCCL, capture the training step in a CUDA graph once "
                 "per batch size and replay it (off: launch every kernel each step)")
      ->check(CLI::IsMember(names_in(kOnOffNames)));
  app.add_option("--amp", t.amp,
                 "off | fp16 | bf16: mixed precision on the GPU: convolutions and fc GEMMs in "
                 "16 bits with fp32 accumulation and fp32 master weights; fp16 with a dynamic "
                 "loss scale (65536, x2 after 2000 clean steps, x0.5 and the step skipped on "
                 "inf/NaN on any rank)")
      ->check(CLI::IsMember(names_in(kAmpModeNames)));
  app.add_option("--threads", c.threads,
                 "BLAS threads per rank (0: usable cores / ranks on this node)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--log-dir", c.log_dir, "rank 0 writes mnist_train.log and metrics.jsonl here");
  app.add_option("--checkpoint-dir", c.checkpoint_dir,
                 "HDF5 checkpoints go here (checked writable before training)");
  app.add_option("--checkpoint-every", c.checkpoint_every,
                 "also checkpoint every N steps (0: epoch ends and the end only)")
      ->check(kNonNegative);
  app.add_option("--keep", c.keep, "keep the newest K checkpoints")->check(CLI::Range(1, 1000000));
  app.add_option("--resume", c.resume,
                 "none | auto (newest valid checkpoint in --checkpoint-dir, else start fresh) | "
                 "PATH of one checkpoint");
  app.add_option("--log-every", c.log_every, "steps between progress lines in batch output")
      ->check(kPositive);
  app.add_option("--straggler-every", c.straggler_every,
                 "steps per straggler window: each rank's compute time (its step minus its waits "
                 "for the others) is compared across ranks once a window, one small all-gather "
                 "(-1: --log-every; 0: off)")
      ->check(CLI::Range(std::int64_t{-1}, std::int64_t{1} << 40));
  app.add_option("--straggler-threshold", c.straggler_threshold,
                 "a rank whose score (the fastest rank's compute / its own) stays below this for "
                 "two windows is named as a straggler")
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--check-replicas", c.check_replicas,
                 "every N steps compare a hash of the parameters across ranks (0: off)")
      ->check(kNonNegative);
  app.add_option("--bucket-cap-kb", c.bucket_cap_kb,
                 "gradient bucket size in KiB (reverse layer order; 25 gives this model 3 buckets)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option(
         "--compression", t.compression,
         "gradient communication hook: none | fp16 | bf16 (divide by world size, 16-bit sum) | "
         "powersgd | powersgd_fp16 | batched_powersgd_fp16 (low-rank, error feedback; CPU "
         "backend)")
      ->check(CLI::IsMember(names_in(kCompressionNames)));
  app.add_option("--powersgd-rank", c.powersgd_rank, "PowerSGD: rank of the low-rank approximation")
      ->check(CLI::Range(1, 1024));
  app.add_option("--powersgd-start-iter", c.powersgd_start_iter,
                 "PowerSGD: plain all-reduce for the steps before this one")
      ->check(kNonNegative);
  app.add_option("--powersgd-min-compression-rate", c.powersgd_min_compression_rate,
                 "PowerSGD: compress a matrix only if this many times fewer elements travel")
      ->check(CLI::Range(0.0, 1e6));
  app.add_flag("--sync-bn", c.sync_bn,
               "SyncBatchNorm: batch statistics (and their gradients) over the union of all "
               "ranks' batches instead of each rank's own (on a GPU exchanged through the host, "
               "without CUDA graphs)");
  app.add_option("--local-sgd-start", c.local_sgd_start,
                 "post-local SGD: global gradient all-reduce for this many steps, then only "
                 "within each node, with a global parameter average every --local-sgd-period "
                 "steps (-1: off)")
      ->check(CLI::Range(std::int64_t{-1}, std::numeric_limits<std::int64_t>::max()));
  app.add_option("--local-sgd-period", c.local_sgd_period,
                 "post-local SGD: steps between global parameter averages")
      ->check(CLI::Range(std::int64_t{1}, std::numeric_limits<std::int64_t>::max()));
  app.add_flag("--no-overlap", c.no_overlap,
               "one all-reduce after backward instead of per-bucket all-reduces during it");
  app.add_option("--overlap-engine", t.overlap_engine,
                 "CPU: how bucket all-reduces progress during backward: test (MPI_Iallreduce + "
                 "MPI_Test from backward) | thread (a communication thread, blocking all-reduce)")
      ->check(CLI::IsMember(names_in(kOverlapEngineNames)));
  app.add_option("--collective-timeout", c.collective_timeout,
                 "seconds any collective may stay in flight before a watchdog names it and aborts "
                 "the whole job (0: no watchdog)")
      ->check(CLI::Range(0.0, 1e9));
  app.add_flag("--debug-collectives", c.debug_collectives,
               "before every collective, compare (sequence, op, count, dtype) across ranks and "
               "report the first mismatch (one small all-gather each: for debugging)");
  app.add_option("--debug-hang-rank", c.debug_hang_rank,
                 "testing: this rank stops before step 3 as if stuck (the watchdog's test)")
      ->check(CLI::Range(-1, 1 << 20));
  app.add_option("--debug-exit-rank", c.debug_exit_rank,
                 "testing: this rank exits with status 1 before step 3, without MPI_Finalize")
      ->check(CLI::Range(-1, 1 << 20));
  app.add_option("--debug-desync-rank", c.debug_desync_rank,
                 "testing: this rank issues one collective its peers do not before step 3 (the "
                 "desync test; needs --debug-collectives, which catches it)")
      ->check(CLI::Range(-1, 1 << 20));
  app.add_option("--flight-recorder", c.flight_recorder,
                 "collectives each communicator remembers (op, dtype, count, step, state, "
                 "times); dumped to --log-dir/flight-rank<R>.json on a watchdog timeout, a "
                 "desync, an error, SIGTERM/SIGINT or the --flight-dump-signal; read them with "
                 "tools/flight_analyze (0: off)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 24));
  app.add_option("--flight-dump-signal", t.flight_dump_signal,
                 "signal that dumps the flight recorder and keeps running (inspect a live hang: "
                 "scancel --signal=USR2 JOBID, or kill -USR2 PID); USR1 | USR2 | HUP")
      ->check(CLI::IsMember({"USR1", "USR2", "HUP"}));
  app.add_option("--trace", c.trace,
                 "write a timeline of the run to FILE (Chrome trace-event JSON for ui.perfetto.dev "
                 "or chrome://tracing): per rank a compute and a communication track with each "
                 "step, data, forward/backward per layer, every bucket's all-reduce, the "
                 "optimizer, evaluation, checkpoints and stops; rank 0 writes it at the end");
  app.add_option("--trace-steps", c.trace_steps,
                 "the steps --trace records, A:B = steps A to B-1 of the step counter (default: "
                 "50 steps after 10 warm-up steps of this run)");
  app.add_option("--debug-sample-log", c.debug_sample_log,
                 "testing: each rank appends the training-set indices it trains on, one per line, "
                 "to DIR/samples-epoch<E>-rank<R>.txt (the data-split check)");
  app.add_option("--debug-slow", c.debug_slow,
                 "testing: RANK:PHASE:MS makes that rank's PHASE (data, forward, backward, "
                 "optimizer) MS milliseconds slower every step (the straggler tests)");
  app.add_flag("--debug-fail-capture", c.debug_fail_capture,
               "testing: every CUDA graph capture makes a call that is illegal while capturing, "
               "so the run must fall back to eager steps (the fallback's test)");
  app.add_option("--requeue-signal", t.requeue_signal,
                 "signal that means \"preempted soon\": checkpoint at the next step boundary and "
                 "stop (SIGTERM does the same); USR1 | USR2 | TERM | HUP")
      ->check(CLI::IsMember({"USR1", "USR2", "TERM", "HUP"}));
  app.add_flag("--requeue", c.requeue,
               "after a stop by the requeue signal or SIGTERM under Slurm, rank 0 runs "
               "`scontrol requeue $SLURM_JOB_ID` so the job comes back and resumes (--resume "
               "auto); the preemption checkpoint is rolling: one per job");
  app.add_option("--init-weights", c.init_weights,
                 "start training (step 0, fresh optimizer) from the model in this checkpoint: a "
                 "full one, or weights only (tools/import_from_pytorch.py)");
  app.add_flag("--eval-only", c.eval_only,
               "evaluate the checkpoint given by --resume (PATH, or auto) on the test split, print "
               "top-1/top-5/loss and exit; no training, nothing written but the log");
  app.add_flag("--verify-checkpoints", c.verify_checkpoints,
               "load every checkpoint in --checkpoint-dir as --resume would (file CRC, HDF5 "
               "checksums, every member and shape, payload CRC, finite values), print one line "
               "each and exit: 0 when all pass, 2 when any fails; no training, nothing written");
  app.add_flag("--print-env", c.print_env,
               "print how rank, local rank and node were derived, then exit");
  app.add_option("--progress", t.progress, "live progress line: auto (on a TTY) | on | off")
      ->check(CLI::IsMember(names_in(kProgressNames)));
}

const char* kDescription =
    "mnist_ddp: data-parallel training of the MNIST ConvNet over MPI.\n"
    "Launch with `mpirun -np N ./mnist_ddp`, `srun --mpi=pmix ./mnist_ddp`, or alone.";

}  // namespace

ParseOutcome parse_cli(int argc, char** argv, Config& cfg, bool print) {
  CLI::App app{kDescription, "mnist_ddp"};
  EnumText text;
  build(app, cfg, text);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (print) fmt::print("{}", app.help());
    return ParseOutcome::ExitOk;
  } catch (const CLI::CallForAllHelp&) {
    if (print) fmt::print("{}", app.help("", CLI::AppFormatMode::All));
    return ParseOutcome::ExitOk;
  } catch (const CLI::CallForVersion&) {
    if (print) fmt::print("mnist_ddp {}\n", kVersion);
    return ParseOutcome::ExitOk;
  } catch (const CLI::ParseError& e) {
    throw UserError(
        fmt::format("command line: {}. Run `mnist_ddp --help` for every flag.", e.what()));
  }
  // The parser admitted only names of each table, so every lookup finds its value.
  cfg.lr_schedule = *value_in(kLrScheduleNames, text.lr_schedule);
  cfg.device = *value_in(kDeviceChoiceNames, text.device);
  cfg.cpu_kernels = *value_in(kCpuKernelsNames, text.cpu_kernels);
  cfg.tf32 = *value_in(kOnOffNames, text.tf32);
  cfg.cuda_graphs = *value_in(kOnOffNames, text.cuda_graphs);
  cfg.amp = *value_in(kAmpModeNames, text.amp);
  cfg.compression = *value_in(kCompressionNames, text.compression);
  cfg.requeue_signal = parse_signal(text.requeue_signal);
  cfg.flight_dump_signal = parse_signal(text.flight_dump_signal);
  cfg.overlap_engine = *value_in(kOverlapEngineNames, text.overlap_engine);
  cfg.comm = *value_in(kCommChoiceNames, text.comm);
  cfg.progress = *value_in(kProgressNames, text.progress);
  if (!cfg.init_weights.empty() && cfg.eval_only) {
    throw UserError(
        "--init-weights starts training from a model; to evaluate one, use --eval-only --resume "
        "PATH");
  }
  if (!cfg.init_weights.empty() && cfg.resume != "none") {
    throw UserError(
        "--init-weights starts a new run from a model, --resume continues a run: use one of them");
  }
  if (cfg.eval_only && cfg.resume == "none") {
    throw UserError(
        "--eval-only evaluates a checkpoint: give it one with --resume PATH (or --resume auto to "
        "take the newest in --checkpoint-dir)");
  }
  if (cfg.flight_dump_signal == cfg.requeue_signal) {
    throw UserError(fmt::format(
        "--flight-dump-signal {0} and --requeue-signal {0}: one signal cannot both dump the "
        "flight recorder and stop the run; give them different signals (defaults: USR2, USR1)",
        text.flight_dump_signal));
  }
  if (!cfg.trace_steps.empty() && !parse_trace_window(cfg.trace_steps)) {
    throw UserError(fmt::format(
        "--trace-steps {}: give A:B, two step numbers with 0 <= A < B (e.g. --trace-steps 100:150)",
        cfg.trace_steps));
  }
  if (!cfg.trace_steps.empty() && cfg.trace.empty()) {
    throw UserError("--trace-steps bounds the timeline of --trace FILE: add --trace FILE");
  }
  if (cfg.debug_desync_rank >= 0 && !cfg.debug_collectives) {
    throw UserError(
        "--debug-desync-rank makes the ranks' collectives disagree, which only "
        "--debug-collectives catches (without it MPI's behaviour is undefined): add "
        "--debug-collectives");
  }
  if (!cfg.debug_slow.empty() && !parse_debug_slow(cfg.debug_slow)) {
    throw UserError(fmt::format(
        "--debug-slow {}: give RANK:PHASE:MS, e.g. 1:backward:200 (PHASE: data, forward, "
        "backward or optimizer; MS > 0)",
        cfg.debug_slow));
  }
  if (cfg.accumulate > 1 && cfg.eval_only) {
    throw UserError(fmt::format(
        "--accumulate {} shapes training steps; --eval-only trains nothing: drop one of them",
        cfg.accumulate));
  }
  if (static_cast<std::int64_t>(cfg.batch_size) * cfg.accumulate > (std::int64_t{1} << 24)) {
    throw UserError(fmt::format(
        "--batch-size {} x --accumulate {} = {} images per rank per step is more than any "
        "dataset holds (at most 16777216); lower one of them",
        cfg.batch_size, cfg.accumulate,
        static_cast<std::int64_t>(cfg.batch_size) * cfg.accumulate));
  }
  if (cfg.nesterov && (cfg.momentum <= 0 || cfg.dampening != 0)) {
    throw UserError("--nesterov needs --momentum > 0 and --dampening 0 (as torch.optim.SGD)");
  }
  return ParseOutcome::Run;
}

void check_flags_for_device(const Config& cfg, Device device, bool thread_multiple) {
  if (device == Device::Cuda && is_powersgd(cfg.compression)) {
    throw UserError(
        fmt::format("--compression {}: PowerSGD runs on the CPU backend only in this version; use "
                    "--device cpu, or --compression none|fp16|bf16 on the GPU",
                    to_string(cfg.compression)));
  }
  if (device == Device::Cuda && cfg.compression != Compression::None &&
      cfg.comm == CommChoice::Mpi) {
    throw UserError(fmt::format(
        "--compression {} with --comm mpi on a GPU: the GPU hooks encode and sum on NCCL's "
        "stream; use --comm nccl (one GPU per rank), or --compression none",
        to_string(cfg.compression)));
  }
  if (cfg.overlap_engine == OverlapEngine::Thread && !thread_multiple) {
    throw UserError(
        "--overlap-engine thread: this MPI library does not provide MPI_THREAD_MULTIPLE; use "
        "--overlap-engine test");
  }
  if (cfg.overlap_engine == OverlapEngine::Thread && device == Device::Cuda) {
    throw UserError(
        "--overlap-engine thread: the communication thread is the CPU backend's; on the GPU "
        "the bucket all-reduces overlap backward on NCCL's own stream (drop the flag)");
  }
  if (cfg.overlap_engine == OverlapEngine::Thread && cfg.local_sgd_start >= 0) {
    throw UserError(
        "--overlap-engine thread with --local-sgd-start: the communication thread reduces "
        "over the whole job only; use --overlap-engine test for post-local SGD");
  }
  if (cfg.amp != AmpMode::Off && device == Device::Cpu) {
    throw UserError(fmt::format(
        "--amp {}: mixed precision runs on the GPU backend only, and this run is on the CPU{}; "
        "drop --amp, or run on a GPU with --device cuda",
        amp_mode_name(cfg.amp),
        cfg.device == DeviceChoice::Auto ? " (--device auto found no usable GPU)" : ""));
  }
  if (cfg.local_sgd_start >= 0 && device == Device::Cuda && cfg.comm == CommChoice::Mpi) {
    throw UserError(
        "--local-sgd-start with --comm mpi on a GPU: the node-local groups are NCCL "
        "communicators; use --comm nccl (one GPU per rank)");
  }
  if (cfg.local_sgd_start >= 0 && cfg.compression != Compression::None) {
    throw UserError(fmt::format(
        "--local-sgd-start with --compression {}: post-local SGD uses the plain all-reduce "
        "(as PyTorch's post_localSGD_hook); drop one of the two",
        to_string(cfg.compression)));
  }
  if (device == Device::Cpu && cfg.comm == CommChoice::Nccl) {
    throw UserError("--comm nccl works on GPU memory: use it with --device cuda (or --comm mpi)");
  }
}

std::string help_text() {
  Config c;
  EnumText t;
  CLI::App app{kDescription, "mnist_ddp"};
  build(app, c, t);
  return app.help();
}

}  // namespace mnist_ddp

namespace mnist_ddp {

std::string config_json(const Config& c) {
  const nlohmann::json j = {{"data", c.data_dir},
                            {"epochs", c.epochs},
                            {"max_steps", c.max_steps},
                            {"batch_size", c.batch_size},
                            {"eval_batch_size", c.eval_batch_size},
                            {"lr", c.lr},
                            {"momentum", c.momentum},
                            {"dampening", c.dampening},
                            {"weight_decay", c.weight_decay},
                            {"nesterov", c.nesterov},
                            {"lr_schedule", name_in(kLrScheduleNames, c.lr_schedule)},
                            {"lr_step_size", c.lr_step_size},
                            {"lr_gamma", c.lr_gamma},
                            {"warmup_steps", c.warmup_steps},
                            {"min_lr", c.min_lr},
                            {"seed", c.seed},
                            {"eval_every", c.eval_every},
                            {"drop_last", c.drop_last},
                            {"shuffle", c.shuffle},
                            {"device", name_in(kDeviceChoiceNames, c.device)},
                            {"cpu_kernels", name_in(kCpuKernelsNames, c.cpu_kernels)},
                            {"comm", name_in(kCommChoiceNames, c.comm)},
                            {"tf32", c.tf32},
                            {"cuda_graphs", c.cuda_graphs},
                            {"amp", name_in(kAmpModeNames, c.amp)},
                            {"threads", c.threads},
                            {"log_dir", c.log_dir},
                            {"log_every", c.log_every},
                            {"straggler_every", c.straggler_every},
                            {"straggler_threshold", c.straggler_threshold},
                            {"check_replicas", c.check_replicas},
                            {"bucket_cap_kb", c.bucket_cap_kb},
                            {"no_overlap", c.no_overlap},
                            {"compression", to_string(c.compression)},
                            {"powersgd_rank", c.powersgd_rank},
                            {"powersgd_start_iter", c.powersgd_start_iter},
                            {"powersgd_min_compression_rate", c.powersgd_min_compression_rate},
                            {"sync_bn", c.sync_bn},
                            {"requeue", c.requeue},
                            {"collective_timeout", c.collective_timeout},
                            {"debug_collectives", c.debug_collectives},
                            {"requeue_signal", signal_name(c.requeue_signal)},
                            {"flight_recorder", c.flight_recorder},
                            {"flight_dump_signal", signal_name(c.flight_dump_signal)},
                            {"accumulate", c.accumulate},
                            {"trace", c.trace},
                            {"trace_steps", c.trace_steps},
                            {"overlap_engine", name_in(kOverlapEngineNames, c.overlap_engine)},
                            {"local_sgd_start", c.local_sgd_start},
                            {"local_sgd_period", c.local_sgd_period},
                            {"checkpoint_dir", c.checkpoint_dir},
                            {"checkpoint_every", c.checkpoint_every},
                            {"keep", c.keep},
                            {"resume", c.resume}};
  // Paths need not be UTF-8 on Linux: invalid bytes become U+FFFD instead of an exception.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace mnist_ddp
