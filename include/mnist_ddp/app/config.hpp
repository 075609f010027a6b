// config.hpp — the run's configuration: every flag's value, as the option table (app/flags.cpp)
// fills it from the command line, --config's TOML or a checkpoint's stored configuration. The
// settings of the layers below are their own option structs, held here whole and handed down as
// they are (the trainer's TrainOptions, the backend's BackendOptions); what only the app layer
// reads is its own fields. Each field's initialiser is its flag's default, written once.
#pragma once

#include <csignal>
#include <cstdint>
#include <string>

#include "mnist_ddp/base/choices.hpp"
#include "mnist_ddp/ops/backend_options.hpp"
#include "mnist_ddp/train/train_options.hpp"

namespace mnist_ddp {

struct Config {
  TrainOptions train;      // the trainer's: schedule, optimizer, gradients, cadence, checkpoints,
                           // stop, test seams (train/train_options.hpp)
  BackendOptions backend;  // the compute backend's (ops/backend_options.hpp)

  // Where the run reads and writes.
  std::string data_dir = "data/dataset";
  std::string log_dir = "logging";
  std::string resume = "none";  // none | auto | best | PATH
  std::string init_weights;     // --init-weights PATH: a new run from that model (step 0)
  std::string trace;            // --trace FILE: the Chrome trace-event timeline
  std::string trace_steps;      // --trace-steps A:B ("": the default window)

  // Placement and communication.
  DeviceChoice device = DeviceChoice::Auto;
  CommChoice comm = CommChoice::Auto;  // auto: NCCL on cuda, MPI on cpu
  OverlapEngine overlap_engine = OverlapEngine::Poll;
  bool cuda_graphs = true;  // capture + replay the GPU training step
  int threads = 1;          // BLAS threads per rank; 0: usable cores / ranks on this node

  // Watching the run.
  double collective_timeout = 300;      // seconds a collective may take before the job aborts
  bool debug_collectives = false;       // fingerprint check across ranks before every collective
  std::int64_t flight_recorder = 2000;  // collectives each communicator remembers; 0: off
  int flight_dump_signal = SIGUSR2;     // --flight-dump-signal: dump the recorder, keep running
  Progress progress = Progress::Auto;

  // What this invocation does instead of (or before) training. The first three are stored with
  // the rest (a checkpoint records how its run was started); the actions after them
  // (--clear-logs, --dry-run, --write-config) never are: a resumed run must not inherit them.
  bool print_env = false;
  bool verify_checkpoints = false;  // --verify-checkpoints: check --checkpoint-dir, then exit
  bool eval_only = false;           // --eval-only: evaluate the --resume checkpoint, no training
  bool clear_logs = false;   // --clear-logs: empty the log and metrics files first (else append)
  bool dry_run = false;      // --dry-run: every check before the first step, the plan, exit 0
  std::string write_config;  // --write-config FILE: the configuration as TOML, then exit
};

}  // namespace mnist_ddp
