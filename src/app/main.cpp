// main.cpp — mnist_ddp's entry point, a table of contents: set up (identity, configuration,
// placement, log, data), build (communicators, ops, model, trainer, start state), train, report,
// tear down explicitly and in order (NCCL -> CUDA -> MPI_Finalize).
#include <algorithm>

#include "mnist_ddp/app/communicators.hpp"
#include "mnist_ddp/app/dry_run.hpp"
#include "mnist_ddp/app/resume.hpp"
#include "mnist_ddp/app/setup.hpp"
#include "mnist_ddp/app/train_and_report.hpp"
#include "mnist_ddp/checkpoint/dir_lock.hpp"
#include "mnist_ddp/comm/replicas.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/process/signals.hpp"
#include "mnist_ddp/trace/trace_file.hpp"
#include "mnist_ddp/train/trainer.hpp"

namespace mnist_ddp {

// Everything with MPI inside lives in this scope, so it is gone before MPI_Finalize (the
// communicators last: they were made first).
// log_dir_lock: the training run's hold on --log-dir, handed out to main, which releases it after
// a failure's flight-recorder dump has been written there.
int run(int argc, char** argv, int rank, int world, const MpiLocality& locality,
        const std::string& host, FlightRecorder& flight, std::unique_ptr<DirLock>& log_dir_lock) {
  int code = kExitOk;
  const std::optional<Identity> id = identify(rank, world, locality, host, &code);
  if (!id) return code;
  Communicators comms(flight);
  Config cfg;
  if (!configure(comms.control(), *id, argc, argv, cfg)) return kExitOk;
  // Collective: --log-dir is this run's (a training run's lock) before anything writes there.
  LogDirClaim logs = claim_log_dir(comms.control(), cfg);
  log_dir_lock = std::move(logs.lock);
  comms.start_watchdog(cfg, rank, host, !logs.visiting);  // the flight recorder: runs only
  const std::unique_ptr<DirLock> lock = lock_checkpoint_dir(comms.control(), cfg);  // collective
  // Both directories are this run's: an earlier run's dump there would read as this run's.
  flight.clear_earlier_dump();
  const Placement where = place(comms.control(), cfg, *id, host);
  if (cfg.print_env) return print_env(*id, where, host);
  if (cfg.verify_checkpoints)
    return verify_checkpoint_dir(comms.control(), cfg.train.checkpoint.dir);
  announce(where, rank);
  flight.set_hosts(where.ranks);  // a dump names every rank's host, a silent peer's included
  const std::unique_ptr<Logger> log = open_log(comms.control(), cfg, *id, logs);
  check_trace_target(comms.control(), cfg);  // collective
  DataSplit data = load_data(comms.control(), cfg, *id, where, *log);
  if (where.plan.nccl()) comms.open_nccl();  // collective: NCCL's id travels by MPI
  const std::unique_ptr<Ops> ops = make_device_ops(comms, cfg, where, data);
  ConvNet model(*ops, std::max(cfg.train.schedule.batch_size, cfg.train.schedule.eval_batch_size));
  if (rank == 0) model.init(cfg.train.schedule.seed);
  broadcast_model(comms.model(), model, comms.control());  // collective: rank 0's weights
  open_extra_communicators(comms, cfg, *id, where, *ops, *log);
  const std::unique_ptr<StampClock> clock = ops->make_stamp_clock();
  Tracer tracer(*clock, !cfg.trace.empty(),
                parse_trace_window(cfg.trace_steps).value_or(TraceWindow{}));
  const std::string stored_config = config_json(cfg);  // what checkpoints and the trace record
  Trainer trainer(cfg.train, stored_config, comms.for_trainer(where.plan), *ops, model, data, *log,
                  &tracer);
  trainer.watch_stragglers(where.ranks);
  const StartState start = restore_start_state(comms.control(), cfg, data, model, trainer, *log);
  // Collective: another run's files this run would overwrite (training runs only).
  if (!cfg.eval_only) check_checkpoint_names(comms.control(), cfg, trainer);
  if (cfg.dry_run) {
    return report_dry_run(cfg, run_shape(*id, where, trainer, data, *log), where.plan, *log);
  }
  if (cfg.eval_only) return evaluate_only(comms.control(), trainer, data, start.model_step, *log);
  const TraceFile trace = trace_file(tracer, cfg.trace, !cfg.trace_steps.empty(), start.first_step,
                                     trainer.total_steps(), hosts_of(where.ranks), stored_config);
  return train_and_report(comms.control(), cfg, trainer, data, *log,
                          cfg.trace.empty() ? nullptr : &trace);
}

}  // namespace mnist_ddp

int main(int argc, char** argv) {
  using namespace mnist_ddp;
  if (const int code = prepare_process(); code != kExitOk) return code;  // before MPI_Init
  mpi_init(&argc, &argv);
  int rank = 0, world = 1;
  MpiLocality locality;
  mpi_query(&rank, &world, &locality);
  install_stop_handlers();
  const std::string host = host_name();
  set_error_identity(rank, host);
  FlightRecorder flight(rank, world, host);  // outlives run(): a failure is dumped after it
  std::unique_ptr<DirLock> log_dir_lock;     // held until that dump is written
  const int code = exit_status_of(
      rank, [&] { return run(argc, argv, rank, world, locality, host, flight, log_dir_lock); },
      [&](const std::string& why) { flight.dump(why); });
  log_dir_lock.reset();  // --log-dir released: the run's files there are complete
  // The run is over on this rank: a stop signal from here on (a launcher ending the job because
  // another rank exited first) leaves with this status, dumping nothing.
  const bool agreed = exit_decided();
  decide_exit(code);
  // Teardown in order: NCCL went with run()'s scope, then the CUDA context, then MPI (together
  // when every rank agreed to stop: all of them reach this point).
  release_cuda_device();
  mpi_finalize(agreed);
  return code;
}
