// communicators.hpp — every communicator of a run in one owner: the control communicator (MPI on
// host memory: agreement, metrics, evaluation sums), the model communicator (where the gradients
// live: that same MPI one on the CPU; NCCL, or host-staged MPI with --comm mpi, on a GPU), the
// node-local group of post-local SGD and the communication thread's duplicate of the world; the
// collective watchdog they all report to, and the communicator it aborts the job through (the
// data one once it exists: NCCL must be aborted too). Destroyed in reverse order of creation,
// before MPI_Finalize.
#pragma once

#include <memory>
#include <string>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/app/plan_communication.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/flight_recorder.hpp"
#include "mnist_ddp/launch/device.hpp"
#include "mnist_ddp/process/watchdog.hpp"
#include "mnist_ddp/train/trainer.hpp"

namespace mnist_ddp {

class Communicators {
 public:
  // The control communicator: the MPI world. flight: where every communicator records its
  // collectives once start_watchdog armed it (it outlives this object: a failure is dumped
  // after the run's scope is gone).
  explicit Communicators(FlightRecorder& flight);
  // The watchdog goes first: it aborts through a communicator that dies after it otherwise.
  ~Communicators();
  Communicators(const Communicators&) = delete;
  Communicators& operator=(const Communicators&) = delete;

  Comm& control() { return *control_; }
  Comm& model() { return *model_; }         // the model's memory: the gradients, buffers, averages
  Comm* local() { return local_.get(); }    // nullptr unless --local-sgd-start >= 0
  Comm* thread() { return thread_.get(); }  // nullptr unless the CPU's communication thread
  FlightRecorder& flight() { return flight_; }

  // The flight recorder armed (--flight-recorder, --log-dir, --flight-dump-signal) and, with
  // --collective-timeout > 0, the watchdog every communicator reports to (from here on); the
  // watchdog dumps the recorder before it aborts the job. recorder: false keeps the flight
  // recorder off (a visitor of --log-dir: --dry-run, --eval-only, --print-env, ...).
  void start_watchdog(const Config& cfg, int rank, const std::string& host, bool recorder);
  // Collective: the NCCL communicator (bootstrapped through MPI), before the ops exist.
  void open_nccl();
  // Collective when the plan stages gradients through the host (a GPU with --comm mpi): the
  // host-staged MPI communicator. Then the model communicator joins the ops' stream (NCCL by
  // events: a step stays capturable as a graph).
  void bind_model(const CommPlan& plan, void* stream);
  // Collective: post-local SGD's group of this color (plan.local_sgd: MPI or NCCL).
  void open_local(const CommPlan& plan, int color, void* stream);
  // Collective: the communication thread's own duplicate of the world (collectives on one
  // communicator must not be issued from two threads at once).
  void open_thread();
  // What the trainer works with: these communicators and the plan that opened them.
  TrainerComms for_trainer(const CommPlan& plan);

 private:
  void watch(Comm& c, const char* name);

  bool debug_collectives_ = false;
  FlightRecorder& flight_;
  std::unique_ptr<Comm> control_;
  Comm* abort_via_ = nullptr;  // read by the watchdog thread only when it aborts
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  std::unique_ptr<Comm> nccl_;
  std::unique_ptr<Comm> staged_;
  Comm* model_ = nullptr;
  std::unique_ptr<Comm> local_;
  std::unique_ptr<Comm> thread_;
};

}  // namespace mnist_ddp
