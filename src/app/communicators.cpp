// communicators.cpp — building the run's communicators in their order, each watched.
#include "mnist_ddp/app/communicators.hpp"

#include <chrono>
#include <thread>

#include "mnist_ddp/app/cuda_backend.hpp"
#include "mnist_ddp/comm/threaded_comm.hpp"
#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {
// How long a watchdog that dumped its flight recorder waits before it aborts the job.
constexpr std::chrono::milliseconds kWatchdogDumpGrace{1000};
}  // namespace

Communicators::Communicators(FlightRecorder& flight) : flight_(flight), control_(make_mpi_comm()) {
  abort_via_ = control_.get();
  model_ = control_.get();
}

Communicators::~Communicators() {
  // The communication thread first, while the watchdog can still abort a sum it is stuck in
  // (its inner communicator reports to the watchdog, not the wrapper).
  thread_.reset();
  for (Comm* c : {thread_.get(), local_.get(), staged_.get(), nccl_.get(), control_.get()})
    if (c != nullptr) c->set_watchdog(nullptr);  // the rings stay: they are the recorder's
  watchdog_.reset();  // joins its thread: nothing can abort through abort_via_ from here on
}

void Communicators::start_watchdog(const Config& cfg, int rank, const std::string& host,
                                   bool recorder) {
  debug_collectives_ = cfg.debug_collectives;
  // Off for a visitor of the log directory: its dumps there would replace a run's.
  flight_.arm(recorder ? static_cast<std::size_t>(cfg.flight_recorder) : 0, cfg.log_dir,
              cfg.flight_dump_signal);
  // No collective may stay in flight longer than --collective-timeout: the watchdog aborts the
  // job through the model communicator once there is one (NCCL must be aborted too), else MPI.
  if (cfg.collective_timeout > 0) {
    watchdog_ = std::make_unique<CollectiveWatchdog>(cfg.collective_timeout, rank, host, [this] {
      // What every communicator was doing, for tools/flight_analyze, before the job ends.
      // The peers waiting in the same collective time out within moments of this rank: the
      // grace lets their watchdogs dump too before this abort kills them.
      if (!flight_.dump("watchdog: a collective exceeded --collective-timeout").empty())
        std::this_thread::sleep_for(kWatchdogDumpGrace);
      abort_via_->abort(kExitCollectiveTimeout);
    });
  }
  watch(*control_, "world");
}

void Communicators::watch(Comm& c, const char* name) {
  // Every communicator reports to the watchdog and the flight recorder and, with
  // --debug-collectives, fingerprints its collectives.
  c.set_watchdog(watchdog_.get());
  c.set_flight_ring(flight_.open(name, c.size()));
  c.set_debug_collectives(debug_collectives_);
}

void Communicators::open_nccl() {
  // Collective: NCCL's unique id travels by MPI_Bcast from rank 0.
  nccl_ = cuda_plugin().make_nccl_comm();
  model_ = nccl_.get();
}

void Communicators::bind_model(const CommPlan& plan, void* stream) {
  // Collectives on the model's memory: MPI on the CPU; on a GPU, NCCL or host-staged MPI.
  MNIST_DDP_CHECK(plan.nccl() == (nccl_ != nullptr), "NCCL opened against the plan");
  if (plan.gradients == GradientComm::HostStagedMpi) {
    staged_ = cuda_plugin().make_host_staged_comm();
    model_ = staged_.get();
  }
  if (model_ != control_.get()) {
    watch(*model_, nccl_ ? "model (NCCL)" : "model (host-staged MPI)");
    abort_via_ = model_;
  }
  model_->bind_stream(stream);
}

void Communicators::open_local(const CommPlan& plan, int color, void* stream) {
  // The group's collectives work where the gradients live, joined to the ops' stream.
  MNIST_DDP_CHECK(plan.local_sgd != LocalSgdComm::None, "a node-local group the plan has not");
  local_ = plan.local_sgd == LocalSgdComm::NcclGroup ? cuda_plugin().make_nccl_group_comm(color)
                                                     : make_mpi_group_comm(color);
  local_->bind_stream(stream);
  watch(*local_, "node-local");
}

void Communicators::open_thread() {
  // The thread's collectives are watched on the communicator it issues them on.
  auto inner = make_mpi_group_comm(0);
  watch(*inner, "communication thread");
  thread_ = make_threaded_comm(std::move(inner));
}

TrainerComms Communicators::for_trainer(const CommPlan& plan) {
  return TrainerComms{*control_, *model_, plan, local_.get(), thread_.get(), &flight_};
}

}  // namespace mnist_ddp
