// main.cpp — mnist_ddp's entry point: MPI up, identity, configuration, data, model, training,
// summary; teardown explicit and in order (NCCL -> CUDA -> MPI_Finalize).
#include <hdf5.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "mnist_ddp/agree.hpp"
#include "mnist_ddp/check.hpp"
#include "mnist_ddp/checkpoint.hpp"
#include "mnist_ddp/cli.hpp"
#include "mnist_ddp/comm.hpp"
#include "mnist_ddp/dataset.hpp"
#include "mnist_ddp/ddp.hpp"
#include "mnist_ddp/device.hpp"
#include "mnist_ddp/log.hpp"
#include "mnist_ddp/model.hpp"
#include "mnist_ddp/ops.hpp"
#include "mnist_ddp/requeue.hpp"
#include "mnist_ddp/runtime.hpp"
#include "mnist_ddp/signals.hpp"
#include "mnist_ddp/trainer.hpp"
#include "mnist_ddp/watchdog.hpp"

namespace mnist_ddp {
namespace {

// What a checkpoint says about its input, against this run's data (rank 0): a version-1 file does
// not record it; another training set (labels crc32) is worth a word before training on.
void warn_about_input(const InputRecord& in, const std::string& path, const DataSplit& data,
                      const std::function<void(const std::string&)>& warn) {
  if (!in.recorded) {
    warn(fmt::format(
        "{} is a format-version-1 checkpoint: it does not record its input transform; this run "
        "normalises with its data's own mean {:.4f} / std {:.4f}, and its checkpoints record them",
        path, data.mean, data.std));
  } else if (in.labels_crc32 != data.crc32 && in.train_count > 0) {
    warn(fmt::format(
        "{} was trained on '{}' (labels crc32 {:08x}, {} training images); this run reads '{}' "
        "(labels crc32 {:08x}, {} training images) from {}: continuing on this run's data",
        path, in.name, in.labels_crc32, in.train_count, data.name, data.crc32, data.train.count,
        data.dir));
  }
}

// Rank 0, on resume: the settings that shape the run (batch, seed, schedule, optimizer) that differ
// from the checkpoint's stored configuration, in one warning naming each (they apply from here).
void warn_about_changed_settings(const std::string& stored_json, const Config& cfg,
                                 const std::function<void(const std::string&)>& warn) {
  const nlohmann::json stored = nlohmann::json::parse(stored_json, nullptr, false);
  if (stored.is_discarded() || !stored.is_object()) return;  // written by an older version
  const nlohmann::json now = nlohmann::json::parse(config_json(cfg));
  std::string changed;
  int n = 0;
  for (const char* key :
       {"batch_size", "seed", "lr", "lr_schedule", "lr_step_size", "lr_gamma", "warmup_steps",
        "min_lr", "momentum", "dampening", "weight_decay", "nesterov"}) {
    if (!stored.contains(key) || stored[key] == now[key]) continue;
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    changed +=
        fmt::format("{}--{} {} -> {}", n++ ? ", " : "", flag, stored[key].dump(), now[key].dump());
  }
  if (n > 0) {
    warn(fmt::format(
        "resume: {} setting(s) differ from the checkpoint's run and apply from this step on: {}", n,
        changed));
  }
}

// Every rank: a model is fed exactly as it was trained, so a recorded transform replaces the
// mean/std computed from this run's training set (they are equal on the same data).
void use_recorded_input(const InputRecord& in, DataSplit& data, Logger& log) {
  if (!in.recorded) return;
  const auto mean = static_cast<float>(in.mean), std = static_cast<float>(in.std);
  if (mean != data.mean || std != data.std) {
    log.info(fmt::format(
        "input: normalising as the model was trained, mean {:.4f} std {:.4f} (recorded in the "
        "checkpoint; this data's own: mean {:.4f} std {:.4f})",
        mean, std, data.mean, data.std));
  }
  data.mean = mean;
  data.std = std;
}

// Everything with MPI inside lives in this scope, so it is gone before MPI_Finalize.
// --verify-checkpoints: rank 0 loads every checkpoint of the directory as --resume would and
// prints one line each; every rank exits with rank 0's verdict.
int verify_checkpoint_dir(Comm& comm, const std::string& dir) {
  float bad = 0;
  // Collective (agreement): a missing directory on rank 0 is one error, every rank exits.
  run_agreed(comm, [&] {
    if (comm.rank() != 0) return;
    auto ops = make_cpu_ops();  // the layout is the same on every device
    const ConvNet model(*ops, 1);
    const auto verdicts = verify_checkpoints(dir, checkpoint_layout(model));
    for (const auto& v : verdicts) {
      if (v.error.empty())
        std::printf("ok %s (step %lld, world size %lld)\n", v.path.c_str(),
                    static_cast<long long>(v.step), static_cast<long long>(v.world_size));
      else
        std::printf("BAD %s\n", v.error.c_str());
      bad += v.error.empty() ? 0.0f : 1.0f;
    }
    std::printf("verified %zu checkpoint(s) in %s: %zu pass, %d fail\n", verdicts.size(),
                dir.c_str(), verdicts.size() - static_cast<std::size_t>(bad),
                static_cast<int>(bad));
    std::fflush(stdout);
  });
  // Collective: every rank exits with rank 0's verdict (the launcher reports one status).
  comm.allreduce(std::span<float>(&bad, 1), ReduceOp::Max);
  return bad > 0 ? kExitUserError : kExitOk;
}

int run(int argc, char** argv, int rank, int world, const MpiLocality& locality,
        const std::string& host) {
  const EnvMap env = read_launch_env();
  Identity id;
  try {
    id = derive_identity(rank, world, locality, env, host, static_cast<long>(getpid()));
  } catch (const UserError& e) {
    // The launcher and MPI disagree, so MPI cannot coordinate who reports: the task Slurm/Open MPI
    // calls 0 does (or every process when that is unknown).
    const auto it = env.find("SLURM_PROCID");
    if (it == env.end() || it->second == "0") {
      std::fprintf(stderr, "mnist_ddp: error: %s\n", e.what());
    }
    return e.exit_code();
  }

  std::unique_ptr<Comm> comm = make_mpi_comm();
  Config cfg;
  ParseOutcome outcome = ParseOutcome::Run;
  // Each run_agreed below is one small all-reduce after a phase that can fail on some ranks
  // only (a file missing on one node, a node without GPUs): all ranks stop together, one prints.
  run_agreed(*comm, [&] {
    check_local_rank(id);
    outcome = parse_cli(argc, argv, cfg, rank == 0);
  });
  // The requeue signal stops like SIGTERM (checkpoint at the next step boundary).
  install_requeue_handler(cfg.requeue_signal);
  if (outcome == ParseOutcome::ExitOk) return kExitOk;
  // The watchdog: no collective may stay in flight longer than --collective-timeout. It aborts
  // through the data communicator once there is one (NCCL must be aborted too), else MPI.
  Comm* abort_via = comm.get();
  std::unique_ptr<CollectiveWatchdog> watchdog;
  if (cfg.collective_timeout > 0) {
    watchdog = std::make_unique<CollectiveWatchdog>(
        cfg.collective_timeout, rank, host,
        [&abort_via] { abort_via->abort(kExitCollectiveTimeout); });
  }
  // Every communicator of this run reports to the watchdog and, with --debug-collectives,
  // fingerprints its collectives.
  auto watch = [&](Comm& c) {
    c.set_watchdog(watchdog.get());
    c.set_debug_collectives(cfg.debug_collectives);
  };
  watch(*comm);

  Device device = Device::Cpu;
  run_agreed(*comm, [&] {
    device = resolve_device(cfg.device);
    check_flags_for_device(cfg, device, mpi_thread_multiple());
  });
  // GPU pinning comes before any other CUDA call that touches a device (DESIGN.md §5).
  std::string device_text = to_string(device);
  const bool use_nccl = device == Device::Cuda && cfg.comm != CommChoice::Mpi;
  if (device == Device::Cuda) {
    int gpu = 0;
    run_agreed(*comm, [&] {
      gpu = choose_gpu(id.local_rank, id.local_size, cuda_device_count(), use_nccl);
    });
    use_cuda_device(gpu);
    device_text = fmt::format("cuda:{} {}", gpu, cuda_device_description(gpu));
    if (use_nccl) {
      // Collective: every rank learns every rank's GPU (host + PCI bus id, NUL-padded into 128
      // bytes), so all of them reach the same verdict on NCCL's one-GPU-per-rank rule.
      constexpr std::size_t kWords = 16;
      const std::string mine = fmt::format("{} on {}", cuda_device_description(gpu), host);
      std::array<std::uint64_t, kWords> word{};
      std::memcpy(word.data(), mine.data(), std::min(mine.size(), kWords * 8 - 1));
      std::vector<std::uint64_t> all(kWords * static_cast<std::size_t>(world));
      comm->allgather(word, all);
      std::vector<std::string> gpus;
      for (int r = 0; r < world; ++r)
        gpus.emplace_back(
            reinterpret_cast<const char*>(&all[kWords * static_cast<std::size_t>(r)]));
      check_gpus_exclusive(gpus);
    }
  }
  const int threads =
      cfg.threads > 0 ? cfg.threads : std::max(1, usable_cores() / std::max(1, id.local_size));
  if (cfg.print_env) {
    std::string out;
    for (const auto& line : id.derivation) out += fmt::format("[rank {}] {}\n", rank, line);
    out += fmt::format("[rank {}] host {} pid {} device {} threads {} (usable cores {})\n", rank,
                       host, id.pid, to_string(device), threads, usable_cores());
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
    return kExitOk;
  }
  if (cfg.verify_checkpoints) return verify_checkpoint_dir(*comm, cfg.checkpoint_dir);
  std::printf("# rank %d/%d local %d host %s pid %ld device %s\n", rank, world, id.local_rank,
              host.c_str(), id.pid, device_text.c_str());
  std::fflush(stdout);
  set_compute_threads(threads);

  std::unique_ptr<Logger> log;
  run_agreed(*comm, [&] {
    const bool tty = cfg.progress == Progress::On ||
                     (cfg.progress == Progress::Auto && isatty(fileno(stdout)) != 0);
    // A resumed run appends to the log and metrics of the run it continues.
    log = std::make_unique<Logger>(rank, cfg.log_dir, tty, cfg.resume != "none");
  });
  // Before any training: a checkpoint directory that cannot be written is an error now, not
  // after an hour of lost work.
  run_agreed(*comm, [&] {
    if (rank == 0 && !cfg.eval_only) prepare_checkpoint_dir(cfg.checkpoint_dir);
  });
  log->file(fmt::format("mnist_ddp {} world {} launcher {} nodes {}", kVersion, world, id.launcher,
                        id.num_nodes));
  log->file("config: " + config_json(cfg));

  DataSplit data;
  run_agreed(*comm, [&] { data = load_data_dir(cfg.data_dir); });
  const char* kernels = device == Device::Cuda ? (cfg.tf32 ? "cuDNN, TF32" : "cuDNN, FP32")
                        : cfg.cpu_kernels == CpuKernels::OneDnn ? "oneDNN"
                                                                : "reference";
  log->info(
      fmt::format("mnist_ddp {}: {} rank(s) on {} node(s), device {} ({} kernels), {} "
                  "thread(s)/rank",
                  kVersion, world, id.num_nodes, to_string(device), kernels, threads));
  log->info(fmt::format(
      "data: {} from {} ({} train, {} test, labels crc32 {:08x}, mean {:.4f} "
      "std {:.4f})",
      data.name, data.dir, data.train.count, data.test.count, data.crc32, data.mean, data.std));

  // Collective (NCCL bootstrap through MPI) when the gradients will live on the GPU.
  std::unique_ptr<Comm> device_comm;
  if (use_nccl) device_comm = make_nccl_comm();
  std::unique_ptr<Ops> ops;
  run_agreed(*comm, [&] { ops = make_ops(device, cfg.cpu_kernels, cfg.tf32); });
  // Collectives on the model's memory: MPI on CPU; on a GPU, NCCL or host-staged MPI.
  std::unique_ptr<Comm> staged_comm;
  if (device == Device::Cuda && !use_nccl) staged_comm = make_host_staged_comm();
  Comm& data_comm = use_nccl ? *device_comm : staged_comm ? *staged_comm : *comm;
  if (&data_comm != comm.get()) {
    watch(data_comm);
    abort_via = &data_comm;
  }
  // NCCL joins the ops' stream by events (no host sync), so a step can be captured as a graph.
  data_comm.bind_stream(ops->stream());
  ops->load_dataset(Ops::kTrain, data.train);  // once: device-resident on a GPU
  ops->load_dataset(Ops::kTest, data.test);
  const int max_batch = std::max(cfg.batch_size, cfg.eval_batch_size);
  ConvNet model(*ops, max_batch);
  if (rank == 0) model.init(cfg.seed);
  broadcast_model(data_comm, model, *comm);

  // Post-local SGD's node-local groups (collective: every rank names its node). Test seam:
  // MNIST_DDP_TEST_RANKS_PER_NODE=k groups ranks k at a time, as if each k shared a node.
  std::unique_ptr<Comm> local_comm;
  if (cfg.local_sgd_start >= 0) {
    int color = id.node;
    run_agreed(*comm, [&] {
      const char* k = std::getenv("MNIST_DDP_TEST_RANKS_PER_NODE");
      if (k == nullptr) return;
      const std::string v = k;
      const bool digits =
          !v.empty() && v.size() < 7 &&
          std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      if (!digits || std::stoi(v) < 1) {
        throw UserError(fmt::format(
            "MNIST_DDP_TEST_RANKS_PER_NODE={}: this test seam takes a positive number of ranks "
            "per pretend node; unset it outside the tests",
            v));
      }
      color = rank / std::stoi(v);
    });
    // The group's collectives work where the gradients live: MPI on the CPU, NCCL on a GPU (joined
    // to the ops' stream like the world's).
    local_comm = device == Device::Cuda ? make_nccl_group_comm(color) : make_mpi_group_comm(color);
    local_comm->bind_stream(ops->stream());
    watch(*local_comm);
    log->info(fmt::format(
        "post-local SGD: global gradient all-reduce for {} steps, then within groups of {} "
        "rank(s) (node-local), parameters averaged over all {} ranks every {} steps",
        cfg.local_sgd_start, local_comm->size(), world, cfg.local_sgd_period));
  }
  // The communication thread's own communicator (a duplicate of the world: collectives on one
  // communicator must not be issued from two threads at once).
  std::unique_ptr<Comm> thread_comm;
  if (device == Device::Cpu && cfg.overlap_engine == OverlapEngine::Thread && !cfg.no_overlap)
    thread_comm = make_mpi_group_comm(0);
  if (thread_comm) watch(*thread_comm);
  Trainer trainer(cfg, *comm, data_comm, *ops, model, data, *log, local_comm.get(),
                  thread_comm.get());
  const CheckpointLayout layout = checkpoint_layout(model);
  const auto warn = [&](const std::string& w) {
    std::fprintf(stderr, "mnist_ddp: warning: %s\n", w.c_str());
    log->file("warning: " + w);
  };
  // --eval-only and --init-weights need a model (from a full or a weights-only checkpoint);
  // --resume needs the whole training state. The same on every rank (flags).
  const bool model_only = cfg.eval_only || !cfg.init_weights.empty();
  std::optional<TrainingState> resume;
  std::optional<ModelWeights> weights;
  run_agreed(*comm, [&] {
    if (rank != 0) return;
    if (model_only) {
      std::string path = cfg.eval_only ? cfg.resume : cfg.init_weights;
      if (path == "auto") {
        std::vector<std::string> warnings;
        auto found = find_resume_checkpoint(cfg.checkpoint_dir, layout, &warnings);
        for (const auto& w : warnings) warn(w);
        if (!found) {
          throw UserError(fmt::format(
              "--eval-only --resume auto: no checkpoint in {} to evaluate; pass --checkpoint-dir "
              "DIR or --resume PATH",
              cfg.checkpoint_dir));
        }
        path = found->first;
      }
      weights = load_model_weights(path, layout);
      log->info(fmt::format("{}: {} (the model of step {}{})",
                            cfg.eval_only ? "eval-only" : "init-weights", path, weights->step,
                            weights->weights_only ? ", weights only" : ""));
      warn_about_input(weights->input, path, data, warn);
      return;
    }
    if (cfg.resume == "none") return;
    std::string from = cfg.resume;
    if (cfg.resume == "auto") {
      std::vector<std::string> warnings;
      auto found = find_resume_checkpoint(cfg.checkpoint_dir, layout, &warnings);
      for (const auto& w : warnings) warn(w);
      if (found) {
        log->info("resume: " + found->first);
        from = found->first;
        resume = std::move(found->second);
      } else {
        log->info(fmt::format("resume: no checkpoint in {}, starting fresh", cfg.checkpoint_dir));
      }
    } else {
      resume = load_checkpoint(cfg.resume, layout);
      log->info("resume: " + cfg.resume);
    }
    if (resume) {
      warn_about_input(resume->input, from, data, warn);
      warn_about_changed_settings(resume->config_json, cfg, warn);
    }
  });
  if (model_only && broadcast_model_weights(*comm, weights, layout)) {
    // Every rank: the model's weights, and the input transform it was trained with.
    use_recorded_input(weights->input, data, *log);
    ops->upload(weights->params.data(), model.params().data(),
                weights->params.size() * sizeof(float));
    ops->upload(weights->buffers.data(), model.buffers().data(),
                weights->buffers.size() * sizeof(float));
    std::copy(weights->num_batches_tracked.begin(), weights->num_batches_tracked.end(),
              model.num_batches_tracked().begin());
    if (!cfg.eval_only) {
      log->info("init-weights: training starts at step 0 with a fresh optimizer from that model");
    }
  }
  if (!model_only && broadcast_training_state(*comm, resume, layout)) {
    use_recorded_input(resume->input, data, *log);
    if (resume->world_size != world) {
      log->info(
          fmt::format("resume: checkpoint written by {} ranks, now {}: model and optimizer "
                      "restored, position re-derived from the {} samples of epoch {} "
                      "already consumed",
                      resume->world_size, world, resume->sample_offset * resume->world_size,
                      resume->epoch + 1));
    }
    trainer.resume_from(*resume);
    log->info(fmt::format("resume: step {}, epoch {}, sample {} of the epoch", resume->step,
                          resume->epoch + 1, resume->sample_offset));
  }
  if (cfg.eval_only) {
    // Collectives (inside): the model every replica holds, evaluated on disjoint test shards.
    const EvalResult e = trainer.evaluate();
    log->info(fmt::format(
        "eval-only: step {} checkpoint on {} ({} test images, {} rank(s)): test top-1 {:.2f}% "
        "top-5 {:.2f}% loss {:.4f}",
        weights->step, data.name, e.count, world, 100 * e.top1, 100 * e.top5, e.loss));
    log->metrics({{"event", "eval_only"},
                  {"step", weights->step},
                  {"top1", e.top1},
                  {"top5", e.top5},
                  {"test_loss", e.loss},
                  {"count", e.count},
                  {"dataset", data.name}});
    return kExitOk;
  }
  log->info(fmt::format(
      "training: {} epoch(s) x {} steps/epoch = {} steps{}, batch {} per rank "
      "({} global), lr {}",
      cfg.epochs, trainer.steps_per_epoch(), trainer.total_steps(),
      trainer.total_steps() < trainer.steps_per_epoch() * cfg.epochs ? " (capped by --max-steps)"
                                                                     : "",
      cfg.batch_size, cfg.batch_size * world, cfg.lr));
  TrainResult r = trainer.run();
  if (r.stop_signal != 0) {
    log->info(fmt::format("stopped by {} at step {}; checkpoint {}; continue with --resume auto",
                          signal_name(r.stop_signal), r.steps, r.last_checkpoint));
    std::int64_t requeued = 0;
    if (cfg.requeue && (r.stop_signal == cfg.requeue_signal || r.stop_signal == SIGTERM)) {
      if (rank == 0) {
        // Said first: once Slurm requeues the job it ends these processes (SIGTERM, which as a
        // second stop signal exits at once), possibly before scontrol has even returned.
        log->info(fmt::format("requeue: asking Slurm to requeue job {} (it resumes from {})",
                              std::getenv("SLURM_JOB_ID") ? std::getenv("SLURM_JOB_ID") : "?",
                              r.last_checkpoint));
        std::string what;
        requeued = request_slurm_requeue(&what) ? 1 : 0;
        log->info("requeue: " + what);
      }
      // Collective: every rank exits with the same status (0 once Slurm has requeued the job).
      comm->broadcast(std::span<std::int64_t>(&requeued, 1), 0);
    }
    return requeued != 0 ? kExitOk : 128 + r.stop_signal;
  }
  if (!r.evaluated) r.final_eval = trainer.evaluate();  // resumed a run that had already ended
  log->metrics({{"event", "done"},
                {"steps", r.steps},
                {"top1", r.final_eval.top1},
                {"top5", r.final_eval.top5},
                {"test_loss", r.final_eval.loss},
                {"train_s", r.train_seconds},
                {"images_per_s", r.images_per_second},
                {"comm_bytes", r.comm_bytes},
                {"dataset", data.name}});
  log->info(
      fmt::format("done: {} steps, test top-1 {:.2f}% top-5 {:.2f}% loss {:.4f}, training "
                  "{:.1f} s at {:.0f} img/s ({} ranks); log {}",
                  r.steps, 100 * r.final_eval.top1, 100 * r.final_eval.top5, r.final_eval.loss,
                  r.train_seconds, r.images_per_second, world, log->log_path()));
  return kExitOk;
}

}  // namespace
}  // namespace mnist_ddp

int main(int argc, char** argv) {
  using namespace mnist_ddp;
  // HDF5's exit-time cleanup would try to close a checkpoint file whose write failed (full disk)
  // and crash; the process ends right after such a failure anyway, so skip that cleanup.
  H5dont_atexit();
  // Every task of a bad srun launch says why, before MPI_Init (which could only abort).
  if (const auto problem = launch_problem_before_mpi(read_launch_env())) {
    std::fprintf(stderr, "mnist_ddp: error: %s\n", problem->c_str());
    return kExitUserError;
  }
  mpi_init(&argc, &argv);
  int rank = 0, world = 1;
  MpiLocality locality;
  mpi_query(&rank, &world, &locality);
  install_stop_handlers();
  const std::string host = host_name();
  set_error_identity(rank, host);
  int code = kExitOk;
  try {
    code = run(argc, argv, rank, world, locality, host);
  } catch (const AgreedExit& e) {
    code = e.code;
  } catch (const UserError& e) {
    // A user error outside an agreement point (all ranks hit it together, e.g. the replica
    // check): rank 0 reports.
    if (rank == 0) std::fprintf(stderr, "mnist_ddp: error: %s\n", e.what());
    code = e.exit_code();
  } catch (const std::exception& e) {
    // Unexpected on this rank only: the others may be inside a collective, so end the whole job.
    fail_internal(e.what(), __FILE__, __LINE__);
  }
  // Teardown in order: the NCCL communicator went with run()'s scope, then the CUDA context,
  // then MPI.
  release_cuda_device();
  mpi_finalize();
  return code;
}
