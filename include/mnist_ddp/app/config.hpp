// config.hpp — the run's configuration: every flag's value, as app/cli.hpp parses it (and
// --config's TOML, and a checkpoint's stored configuration). The app layer's own: the layers below
// take the small option structs app/run_options.hpp builds from it.
#pragma once

#include <csignal>
#include <cstdint>
#include <string>

#include "mnist_ddp/base/amp_mode.hpp"
#include "mnist_ddp/base/choices.hpp"

namespace mnist_ddp {

struct Config {
  std::string data_dir = "data/dataset";
  int epochs = 2;
  std::int64_t max_steps = 0;  // 0: no limit
  int batch_size = 100;        // per rank (per micro-batch with --accumulate)
  int accumulate = 1;          // micro-batches per optimizer step (DDP's no_sync)
  int eval_batch_size = 500;   // per rank
  double lr = 0.01;
  double momentum = 0.9;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  LrSchedule lr_schedule = LrSchedule::Constant;
  int lr_step_size = 1;
  double lr_gamma = 0.1;
  std::int64_t warmup_steps = 0;
  double min_lr = 0.0;
  std::uint64_t seed = 42;
  std::int64_t eval_every = 0;  // steps; 0: only at the end of each epoch
  bool drop_last = false;
  bool shuffle = true;
  DeviceChoice device = DeviceChoice::Auto;
  CpuKernels cpu_kernels = CpuKernels::OneDnn;
  CommChoice comm = CommChoice::Auto;  // auto: NCCL on cuda, MPI on cpu
  bool tf32 = true;                    // TF32 tensor cores on the GPU (PyTorch's cuDNN default)
  GpuKernels gpu_kernels = GpuKernels::Cudnn;  // --gpu-kernels: own kernels where cuDNN is slow
  bool cuda_graphs = true;                     // capture + replay the GPU training step
  AmpMode amp = AmpMode::Off;  // mixed precision (GPU): fp16 + loss scaling, or bf16
  int threads = 1;             // BLAS threads per rank; 0: usable cores / ranks on this node
  std::string log_dir = "logging";
  bool clear_logs = false;  // --clear-logs: empty the log and metrics files first (else append)
  std::string checkpoint_dir = "checkpoints";
  std::int64_t checkpoint_every = 0;  // steps; 0: only at epoch ends and at the end
  int keep = 3;
  bool keep_best = false;       // --keep-best: the best test top-1's checkpoint out of the rotation
  std::string resume = "none";  // none | auto | best | PATH
  std::int64_t log_every = 50;
  std::int64_t check_replicas = 0;
  std::int64_t straggler_every = -1;  // steps per straggler window; -1: --log-every; 0: off
  double straggler_threshold = 0.7;   // a rank scoring below this two windows running is slow
  int bucket_cap_kb = 25;  // gives this model 3 buckets: fc (61 KiB), layer2 (50 KiB), layer1
  bool no_overlap = false;
  OverlapEngine overlap_engine = OverlapEngine::Test;
  Compression compression = Compression::None;
  int powersgd_rank = 2;
  std::int64_t powersgd_start_iter = 1000;  // as the seed (PyTorch's default is 10)
  double powersgd_min_compression_rate = 2.0;
  bool sync_bn = false;               // SyncBatchNorm over all ranks
  std::int64_t local_sgd_start = -1;  // post-local SGD from this step on; -1: off
  std::int64_t local_sgd_period = 4;  // global parameter average every this many steps
  bool print_env = false;
  bool verify_checkpoints = false;  // --verify-checkpoints: check --checkpoint-dir, then exit
  bool eval_only = false;           // --eval-only: evaluate the --resume checkpoint, no training
  std::string init_weights;         // --init-weights PATH: a new run from that model (step 0)
  double collective_timeout = 300;  // seconds a collective may take before the job is aborted
  bool debug_collectives = false;   // fingerprint check across ranks before every collective
  int debug_hang_rank = -1;         // test seam: this rank stops before step 3 (forever)
  int debug_exit_rank = -1;         // test seam: this rank exits 1 before step 3
  int debug_desync_rank = -1;       // test seam: this rank issues an extra collective at step 3
  std::int64_t flight_recorder = 2000;  // collectives each communicator remembers; 0: off
  int flight_dump_signal = SIGUSR2;     // --flight-dump-signal: dump the recorder, keep running
  std::string trace;                    // --trace FILE: the Chrome trace-event timeline
  std::string trace_steps;              // --trace-steps A:B ("": the default window)
  std::string debug_sample_log;         // test seam: DIR for each rank's consumed sample indices
  bool debug_fail_capture = false;  // test seam: every CUDA graph capture fails (eager fallback)
  std::string debug_slow;           // test seam: RANK:PHASE:MS, a rank's phase made MS slower
  bool requeue = false;             // on the requeue signal / SIGTERM under Slurm: scontrol requeue
  int requeue_signal = SIGUSR1;     // --requeue-signal (signals.hpp parse_signal)
  Progress progress = Progress::Auto;
  // What this invocation does instead of training (not part of the stored configuration).
  bool dry_run = false;      // --dry-run: every check before the first step, the plan, exit 0
  std::string write_config;  // --write-config FILE: the configuration as TOML, then exit
};

}  // namespace mnist_ddp
