// setup.hpp — the phases main strings together, in order: who this rank is, its configuration,
// where it runs, the log, the data, the model. Each phase that can fail on some ranks only ends
// in an agreement (run_agreed), so every rank stops together and one of them reports.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/app/plan_communication.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/data/dataset.hpp"
#include "mnist_ddp/diagnostics/log.hpp"
#include "mnist_ddp/launch/device.hpp"
#include "mnist_ddp/launch/identity.hpp"
#include "mnist_ddp/launch/placement.hpp"

namespace mnist_ddp {

class Communicators;
class ConvNet;
class DirLock;
class Ops;

// Before MPI_Init: HDF5's exit-time cleanup off (it would try to close a checkpoint whose write
// failed, a full disk, and crash; the process ends right after such a failure anyway), and a bad
// srun launch refused by every task with its reason (after MPI_Init it could only abort).
// kExitOk, or the exit status.
int prepare_process();

// Runs the job's body and turns how it ended into the exit status: an agreed error's code, a user
// error met by every rank together (rank 0 reports it), or, for anything unexpected on this rank
// only (the others may be inside a collective), an abort of the whole job. on_failure(why) runs
// first on every rank an error ends (the flight recorder's dump), not for agreed exits, which
// decide the exit (process/signals.hpp decide_exit) once run() has unwound.
int exit_status_of(int rank, const std::function<int()>& body,
                   const std::function<void(const std::string&)>& on_failure);

// This rank's identity from MPI and the launcher's variables, or nullopt after the launcher-
// mismatch error was printed (by the task the launcher calls 0: MPI cannot coordinate who
// reports when it and the launcher disagree); *exit_code is then the status to exit with.
std::optional<Identity> identify(int rank, int world, const MpiLocality& locality,
                                 const std::string& host, int* exit_code);

// Collective (agreement): the command line (and --config's file), and the requeue signal's
// handler. False when the run ends here (--help, --version, --write-config: written).
bool configure(Comm& control, const Identity& id, int argc, char** argv, Config& cfg);

// The log directory as this run has it: held (a training run: the lock, for the run's life), or
// only visited (--dry-run, --eval-only, --print-env, --verify-checkpoints: no lock, no flight
// recorder, so neither a visitor's start nor its failure touches another run's dumps).
struct LogDirClaim {
  std::unique_ptr<DirLock> lock;  // a training run's, on rank 0; nullptr otherwise
  bool visiting = false;          // every rank
  // Who holds the directory a visitor is in; "" when nobody does. Every rank.
  std::string held_by;
  bool files() const { return held_by.empty(); }  // whether this run may write its files
};
// Collective (agreement): a training run takes --log-dir's lock (dir_lock.hpp kLogDir) before
// anything writes there: a directory held by another running job is one error naming it and its
// holder, every rank exits 2. A visitor takes no lock and, beside a holder, writes nothing there
// (the console only); a directory it cannot read counts as free (its log then says why).
LogDirClaim claim_log_dir(Comm& control, const Config& cfg);

// Collective (agreement): a run that will write checkpoints takes its directory's lock (rank 0
// holds it; dir_lock.hpp) before it touches anything, and keeps it until the returned object goes
// (the end of run()). A held directory is one error naming the holder: every rank exits 2.
// --eval-only, --verify-checkpoints and --print-env only read: nullptr.
std::unique_ptr<DirLock> lock_checkpoint_dir(Comm& control, const Config& cfg);

// Where this rank runs and with how many compute threads.
struct Placement {
  Device device = Device::Cpu;
  CommPlan plan;  // every communicator and step-capture choice (app/plan_communication.hpp)
  std::string device_text;           // "cpu" | "cuda:N <name> (pci ...)"
  int threads = 1;                   // BLAS/oneDNN threads of this rank
  std::vector<RankPlacement> ranks;  // every rank's, in rank order
};
// Collective: the device (--device) and the communication plan for it, the GPU pinned before any
// other CUDA call touches one, every rank's placement from one allgather, and NCCL's
// one-GPU-per-rank check over it.
Placement place(Comm& control, const Config& cfg, const Identity& id, const std::string& host);

// --print-env: how this rank's identity was derived; returns the exit status.
int print_env(const Identity& id, const Placement& where, const std::string& host);

// --verify-checkpoints: rank 0 loads every checkpoint of the directory as --resume would and
// prints one line each; collective: every rank returns rank 0's verdict as its exit status.
int verify_checkpoint_dir(Comm& control, const std::string& dir);

// Rank 0's placement table; the compute threads set.
void announce(const Placement& where, int rank);

// Collective (agreements): the log (appended to, --clear-logs empties it first; the console only
// when the directory is another run's: logs.files()) and a checkpoint directory proven writable
// before any training; the run's header lines in the log.
std::unique_ptr<Logger> open_log(Comm& control, const Config& cfg, const Identity& id,
                                 const LogDirClaim& logs);

// Collective (agreement): with --trace, rank 0 checks that its file can be written (trace_file.hpp
// check_trace_path), so a trace that cannot be written costs no run first; nothing without it.
void check_trace_target(Comm& control, const Config& cfg);

// Collective (agreement): the training and test splits, described in the log.
DataSplit load_data(Comm& control, const Config& cfg, const Identity& id, const Placement& where,
                    Logger& log);

// Collective (agreement): the ops of the placement's device; the model communicator joined to
// their stream (host-staged MPI made first on a GPU without NCCL); both splits loaded (on a GPU,
// device-resident once).
std::unique_ptr<Ops> make_device_ops(Communicators& comms, const Config& cfg,
                                     const Placement& where, const DataSplit& data);

// Collective: the extra communicators the flags ask for: post-local SGD's node-local group
// (test seam MNIST_DDP_TEST_RANKS_PER_NODE=k groups ranks k at a time, as if each k shared a
// node) and the CPU communication thread's own duplicate of the world.
void open_extra_communicators(Communicators& comms, const Config& cfg, const Identity& id,
                              const Placement& where, Ops& ops, Logger& log);

}  // namespace mnist_ddp
