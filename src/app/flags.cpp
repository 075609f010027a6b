// flags.cpp — every flag of mnist_ddp, declared once, one group per concern: its name, the option
// field it fills (whose initialiser in that struct is the default), its help, its checks, and
// whether a resume compares it. The parser, --help, docs/flags.md's check, the stored
// configuration, --write-config and the resume comparison all read this table (flag_table.hpp).
// A new flag is a field in the option struct of the code that reads it, one declaration here, and
// that code: nothing else. Refused combinations of flags are flag_rules.cpp's tables.
#include "flags.hpp"

#include <csignal>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "mnist_ddp/model/optimizer.hpp"
#include "mnist_ddp/process/signals.hpp"
#include "mnist_ddp/train/test_seams.hpp"

namespace mnist_ddp {
namespace {

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

// A signal flag: typed and stored by name (USR1), held as its number.
Flag signal_flag(FlagTable& t, const std::string& name, int& field, const std::string& help,
                 const std::vector<std::string>& allowed) {
  return t.text<int>(
      name, field, [](const int& s) { return std::string(signal_flag_name(s)); },
      [](const std::string& s) { return parse_signal(s); }, help, CLI::IsMember(allowed));
}

void configuration_flags(FlagTable& t, Config& c) {
  t.group("Configuration and checks");
  t.config_file(
      "read flags from this TOML file: each line `name = value`, the name a flag's without its "
      "dashes (batch-size = 200, data = \"/scratch/mnist\", sync-bn = true); flags on the "
      "command line override it; --write-config FILE writes one");
  t.action("--write-config", c.write_config,
           "write this run's configuration (every flag, the file's and the command line's) to "
           "FILE as TOML for --config, and exit without training; with --resume PATH|auto|best "
           "the configuration stored in that checkpoint (flags given here override it)")
      .type_name("FILE");
  t.action("--dry-run", c.dry_run,
           "make every check a run makes before its first step (flags, data, the checkpoint "
           "directory's lock and writability, launcher, devices, communicators, --resume), print "
           "the plan (steps, batches per rank, checkpoints, where outputs go) and exit 0; "
           "nothing is written but the log (mnist_train.log)");
}

// The schedule and the optimizer: train/train_options.hpp ScheduleOptions, OptimizerOptions.
void training_flags(FlagTable& t, ScheduleOptions& s, OptimizerOptions& o) {
  t.group("Training");
  t.option("--epochs", s.epochs, "passes over the training set").check(positive_check());
  t.option("--max-steps", s.max_steps, "stop after this many optimizer steps (0: no limit)")
      .check(non_negative_check());
  t.option("--batch-size", s.batch_size,
           "images per rank per step (per micro-batch with --accumulate)")
      .check(CLI::Range(1, 65536))
      .compared_on_resume();
  t.option("--accumulate", s.accumulate,
           "micro-batches of --batch-size per rank in one optimizer step: gradients add up "
           "locally and are all-reduced once, on the last (DDP's no_sync); steps, the LR "
           "schedule, --max-steps and the checkpoint/log cadences count optimizer steps")
      .check(CLI::Range(1, 4096))
      .compared_on_resume();
  t.option("--lr", o.lr.base_lr, "base learning rate")
      .check(non_negative_check())
      .compared_on_resume();
  t.option("--momentum", o.sgd.momentum, "SGD momentum (0 disables)")
      .check(CLI::Range(0.0, 1.0))
      .compared_on_resume();
  t.option("--dampening", o.sgd.dampening, "SGD dampening")
      .check(CLI::Range(0.0, 1.0))
      .compared_on_resume();
  t.option("--weight-decay", o.sgd.weight_decay, "L2 penalty added to the gradient")
      .check(non_negative_check())
      .compared_on_resume();
  t.flag("--nesterov", o.sgd.nesterov, "Nesterov momentum (needs --momentum > 0, dampening 0)")
      .compared_on_resume();
  t.choice("--lr-schedule", o.lr.schedule, kLrScheduleNames, "constant | step | cosine")
      .compared_on_resume();
  t.option("--lr-step-size", o.lr.step_size, "step schedule: epochs between decays")
      .check(positive_check())
      .compared_on_resume();
  t.option("--lr-gamma", o.lr.gamma, "step schedule: decay factor")
      .check(non_negative_check())
      .compared_on_resume();
  t.option("--warmup-steps", o.lr.warmup_steps, "linear warm-up steps (0: none)")
      .check(non_negative_check())
      .compared_on_resume();
  t.option("--min-lr", o.lr.min_lr, "cosine schedule: final learning rate")
      .check(non_negative_check())
      .compared_on_resume();
  t.option("--seed", s.seed, "seed for initial weights and the shuffle").compared_on_resume();
}

void data_flags(FlagTable& t, Config& c, ScheduleOptions& s, CadenceOptions& k) {
  t.group("Data");
  t.option("--data", c.data_dir,
           "directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]");
  t.option("--eval-batch-size", s.eval_batch_size, "images per rank per evaluation batch")
      .check(CLI::Range(1, 65536));
  t.option("--eval-every", k.eval_every, "also evaluate every N steps (0: epoch ends only)")
      .check(non_negative_check());
  t.flag("--drop-last", s.drop_last,
         "drop the tail of the training set that does not divide by the world size "
         "(default: pad by repeating the head)");
  t.negated_flag("--no-shuffle", s.shuffle, "visit training images in file order");
}

// How gradients travel: train/train_options.hpp GradientOptions, and the app's communicators.
void distributed_flags(FlagTable& t, Config& c, GradientOptions& g, CadenceOptions& k) {
  t.group("Distributed");
  t.choice("--comm", c.comm, kCommChoiceNames,
           "auto (nccl on cuda, mpi on cpu) | nccl | mpi (host-staged; lets ranks share a GPU)");
  t.option("--bucket-cap-kb", g.bucket_cap_kb,
           "gradient bucket size in KiB (reverse layer order; 25 gives this model 3 buckets)")
      .check(CLI::Range(1, 1 << 20));
  t.choice("--compression", g.compression, kCompressionNames,
           "gradient communication hook: none | fp16 | bf16 (divide by world size, 16-bit sum) | "
           "powersgd | powersgd_fp16 | batched_powersgd_fp16 (low-rank, error feedback; CPU "
           "backend)");
  t.option("--powersgd-rank", g.powersgd.rank, "PowerSGD: rank of the low-rank approximation")
      .check(CLI::Range(1, 1024));
  t.option("--powersgd-start-iter", g.powersgd.start_iter,
           "PowerSGD: plain all-reduce for the steps before this one")
      .check(non_negative_check());
  t.option("--powersgd-min-compression-rate", g.powersgd.min_compression_rate,
           "PowerSGD: compress a matrix only if this many times fewer elements travel")
      .check(CLI::Range(0.0, 1e6));
  t.flag("--sync-bn", g.sync_bn,
         "SyncBatchNorm: batch statistics (and their gradients) over the union of all "
         "ranks' batches instead of each rank's own (on a GPU exchanged through the host, "
         "without CUDA graphs)");
  t.option("--local-sgd-start", g.local_sgd.start,
           "post-local SGD: global gradient all-reduce for this many steps, then only "
           "within each node, with a global parameter average every --local-sgd-period "
           "steps (-1: off)")
      .check(CLI::Range(std::int64_t{-1}, kInt64Max));
  t.option("--local-sgd-period", g.local_sgd.period,
           "post-local SGD: steps between global parameter averages")
      .check(CLI::Range(std::int64_t{1}, kInt64Max));
  t.negated_flag("--no-overlap", g.overlap,
                 "one all-reduce after backward instead of per-bucket all-reduces during it");
  // "poll" was named "test" (after MPI_Test) until 0.1.0, too easily read as the test suite's:
  // the old name stays accepted for one release (remove the alias in 0.2).
  t.choice("--overlap-engine", c.overlap_engine, kOverlapEngineNames,
           "CPU: how bucket all-reduces progress during backward: poll (MPI_Iallreduce, "
           "polled with MPI_Test from backward) | thread (a communication thread, blocking "
           "all-reduce); `test`, poll's old name, is accepted until 0.2",
           {{"test", OverlapEngine::Poll}});
  t.option("--check-replicas", k.check_replicas,
           "every N steps compare a hash of the parameters across ranks (0: off)")
      .check(non_negative_check());
  t.option("--collective-timeout", c.collective_timeout,
           "seconds any collective may stay in flight before a watchdog names it and aborts "
           "the whole job (0: no watchdog)")
      .check(CLI::Range(0.0, 1e9));
}

// Checkpoints and the start state: train/train_options.hpp CheckpointOptions, StopOptions.
void checkpoint_flags(FlagTable& t, Config& c, CheckpointOptions& k, StopOptions& s) {
  t.group("Checkpoints");
  t.option("--checkpoint-dir", k.dir,
           "HDF5 checkpoints go here (checked writable before training)");
  t.option("--checkpoint-every", k.every,
           "also checkpoint every N steps (0: epoch ends and the end only)")
      .check(non_negative_check());
  t.option("--keep", k.keep, "keep the newest K checkpoints").check(CLI::Range(1, 1000000));
  t.flag("--keep-best", k.keep_best,
         "also keep the checkpoint with the best test top-1 so far as --checkpoint-dir/"
         "ckpt-best.h5, out of the --keep rotation (an evaluation that beats it is checkpointed)");
  t.option("--resume", c.resume,
           "none | auto (newest valid checkpoint in --checkpoint-dir, else start fresh) | best "
           "(--checkpoint-dir/ckpt-best.h5, from --keep-best) | PATH of one checkpoint");
  t.option("--init-weights", c.init_weights,
           "start training (step 0, fresh optimizer) from the model in this checkpoint: a "
           "full one, or weights only (tools/import_from_pytorch.py)");
  t.flag("--eval-only", c.eval_only,
         "evaluate the checkpoint given by --resume (PATH, or auto) on the test split, print "
         "top-1/top-5/loss and exit; no training, nothing written but the log");
  t.flag("--verify-checkpoints", c.verify_checkpoints,
         "load every checkpoint in --checkpoint-dir as --resume would (file CRC, HDF5 "
         "checksums, every member and shape, payload CRC, finite values), print one line "
         "each and exit: 0 when all pass, 2 when any fails; no training, nothing written");
  signal_flag(t, "--requeue-signal", s.requeue_signal,
              "signal that means \"preempted soon\": checkpoint at the next step boundary and "
              "stop (SIGTERM does too, and never requeues); USR1 | USR2 | TERM | HUP",
              {"USR1", "USR2", "TERM", "HUP"});
  t.flag(
      "--requeue", s.requeue,
      "after a stop by the requeue signal (not SIGTERM: scancel cancels) under Slurm, rank 0 runs "
      "`scontrol requeue $SLURM_JOB_ID` so the job comes back and resumes (--resume "
      "auto); the preemption checkpoint is rolling: one per job");
}

void observability_flags(FlagTable& t, Config& c, CadenceOptions& k) {
  t.group("Logging and observability");
  t.option("--log-dir", c.log_dir,
           "rank 0 writes mnist_train.log and metrics.jsonl here, after the records of earlier "
           "runs in it (tools/compare_runs reads each run apart); one running job at a time "
           "(a second is refused; --dry-run and --eval-only beside it print to the console only)");
  // An action, not a setting: a resumed or requeued run (or a --config written from this one)
  // must never inherit it and empty the records of the run it continues.
  t.action("--clear-logs", c.clear_logs,
           "empty --log-dir's mnist_train.log and metrics.jsonl before this new run writes them "
           "(default: append after the earlier runs' records; not with --resume)");
  t.option("--log-every", k.log_every, "steps between progress lines in batch output")
      .check(positive_check());
  t.choice("--progress", c.progress, kProgressNames,
           "live progress line: auto (on a TTY) | on | off");
  t.flag("--print-env", c.print_env, "print how rank, local rank and node were derived, then exit");
  t.option("--straggler-every", k.straggler_every,
           "steps per straggler window: each rank's compute time (its step minus its waits "
           "for the others) is compared across ranks once a window, one small all-gather "
           "(-1: --log-every; 0: off)")
      .check(CLI::Range(std::int64_t{-1}, std::int64_t{1} << 40));
  t.option("--straggler-threshold", k.straggler_threshold,
           "a rank whose score (the fastest rank's compute / its own) stays below this for "
           "two windows is named as a straggler")
      .check(CLI::Range(0.01, 1.0));
  t.flag("--debug-collectives", c.debug_collectives,
         "before every collective, compare (sequence, op, count, dtype) across ranks and "
         "report the first mismatch (one small all-gather each: for debugging)");
  t.option("--flight-recorder", c.flight_recorder,
           "collectives each communicator remembers (op, dtype, count, step, state, "
           "times); dumped to --log-dir/flight-rank<R>.json on a watchdog timeout, a "
           "desync, an error, SIGTERM/SIGINT or the --flight-dump-signal; read them with "
           "tools/flight_analyze (0: off)")
      .check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 24));
  signal_flag(t, "--flight-dump-signal", c.flight_dump_signal,
              "signal that dumps the flight recorder and keeps running (inspect a live hang: "
              "scancel --signal=USR2 JOBID, or kill -USR2 PID); USR1 | USR2 | HUP",
              {"USR1", "USR2", "HUP"});
  t.option("--trace", c.trace,
           "write a timeline of the run to FILE (Chrome trace-event JSON for ui.perfetto.dev "
           "or chrome://tracing): per rank a compute and a communication track with each "
           "step, data, forward/backward per layer, every bucket's all-reduce, the "
           "optimizer, evaluation, checkpoints and stops; rank 0 writes it at the end");
  t.option("--trace-steps", c.trace_steps,
           "the steps --trace records, A:B = steps A to B-1 of the step counter (default: "
           "50 steps after 10 warm-up steps of this run)");
}

// The GPU: ops/backend_options.hpp BackendOptions, and the trainer's mixed precision.
void gpu_flags(FlagTable& t, Config& c, BackendOptions& b, GradientOptions& g) {
  t.group("GPU");
  t.choice("--device", c.device, kDeviceChoiceNames,
           "cpu | cuda | auto (cuda when a GPU is visible)");
  t.choice("--tf32", b.tf32, kOnOffNames,
           "on | off: TF32 tensor cores for GPU convolutions and GEMMs");
  t.choice("--gpu-kernels", b.gpu_kernels, kGpuKernelsNames,
           "cudnn | own: on a GPU, layer2's weight gradient by cuDNN, or by this project's "
           "deterministic TF32 tensor-core kernel (experimental: not yet run on a GPU)");
  t.choice("--cuda-graphs", c.cuda_graphs, kOnOffNames,
           "on | off: on a GPU with NCCL, capture the training step in a CUDA graph once "
           "per batch size and replay it (off: launch every kernel each step)");
  t.choice("--amp", g.amp, kAmpModeNames,
           "off | fp16 | bf16: mixed precision: convolutions and fc GEMMs in 16 bits with fp32 "
           "accumulation and fp32 master weights; fp16 (GPU) with a dynamic loss scale (65536, "
           "x2 after 2000 clean steps, x0.5 and the step skipped on inf/NaN on any rank); bf16 "
           "on a GPU, or on a CPU with AVX512-BF16 or AMX (oneDNN's bf16 kernels)")
      .compared_on_resume();
}

void cpu_flags(FlagTable& t, Config& c, BackendOptions& b) {
  t.group("CPU");
  t.choice("--cpu-kernels", b.cpu_kernels, kCpuKernelsNames,
           "CPU backend: onednn (fast) | reference (im2col + OpenBLAS, the test oracle)");
  t.option("--threads", c.threads, "BLAS threads per rank (0: usable cores / ranks on this node)")
      .check(CLI::Range(0, 1024));
}

// train/test_seams.hpp SeamOptions: hidden from --help (--help-all lists them), keeping their
// group in the parser so an error about one still names the flag.
void test_seam_flags(FlagTable& t, SeamOptions& s) {
  t.group(kTestSeamsGroup, /*hidden=*/true);
  t.option("--debug-hang-rank", s.hang_rank,
           "testing: this rank stops before step 3 as if stuck (the watchdog's test)")
      .check(CLI::Range(-1, 1 << 20));
  t.option("--debug-exit-rank", s.exit_rank,
           "testing: this rank exits with status 1 before step 3, without MPI_Finalize")
      .check(CLI::Range(-1, 1 << 20));
  t.option("--debug-desync-rank", s.desync_rank,
           "testing: this rank issues one collective its peers do not before step 3 (the "
           "desync test; needs --debug-collectives, which catches it)")
      .check(CLI::Range(-1, 1 << 20));
  t.option("--debug-sample-log", s.sample_log,
           "testing: each rank appends the training-set indices it trains on, one per line, "
           "to DIR/samples-epoch<E>-rank<R>.txt (the data-split check)");
  t.text<std::optional<DebugSlow>>(
      "--debug-slow", s.slow,
      [](const std::optional<DebugSlow>& v) { return v ? debug_slow_text(*v) : std::string(); },
      [](const std::string& text) { return text.empty() ? std::nullopt : parse_debug_slow(text); },
      "testing: RANK:PHASE:MS makes that rank's PHASE (data, forward, backward, "
      "optimizer) MS milliseconds slower every step (the straggler tests)",
      CLI::Validator(
          [](std::string& text) {
            return text.empty() || parse_debug_slow(text)
                       ? std::string()
                       : "got " + text +
                             "; give RANK:PHASE:MS, e.g. 1:backward:200 (PHASE: data, forward, "
                             "backward or optimizer; MS > 0)";
          },
          ""));
  t.flag("--debug-fail-capture", s.fail_capture,
         "testing: every CUDA graph capture makes a call that is illegal while capturing, "
         "so the run must fall back to eager steps (the fallback's test)");
}

}  // namespace

void declare_flags(FlagTable& t, Config& c) {
  TrainOptions& train = c.train;
  configuration_flags(t, c);
  training_flags(t, train.schedule, train.optimizer);
  data_flags(t, c, train.schedule, train.cadence);
  distributed_flags(t, c, train.gradients, train.cadence);
  checkpoint_flags(t, c, train.checkpoint, train.stop);
  observability_flags(t, c, train.cadence);
  gpu_flags(t, c, c.backend, train.gradients);
  cpu_flags(t, c, c.backend);
  test_seam_flags(t, train.seams);
}

}  // namespace mnist_ddp
