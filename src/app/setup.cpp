// setup.cpp — the set-up phases of a run (setup.hpp).
#include "mnist_ddp/app/setup.hpp"

#include "mnist_ddp/app/flag_rules.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>

#include "mnist_ddp/app/communicators.hpp"
#include "mnist_ddp/app/config_file.hpp"
#include "mnist_ddp/app/cuda_backend.hpp"
#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/checkpoint/dir_lock.hpp"
#include "mnist_ddp/checkpoint/store.hpp"
#include "mnist_ddp/comm/agree.hpp"
#include "mnist_ddp/comm/reducer.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/process/signals.hpp"
#include "mnist_ddp/trace/trace_file.hpp"
#include "mnist_ddp/train/test_seams.hpp"

namespace mnist_ddp {

int prepare_process() {
  H5dont_atexit();
  // The checkpoint layer's one test seam (MNIST_DDP_TEST_FAIL_CHECKPOINT), injected from here.
  set_checkpoint_write_hook(&checkpoint_write_seam);
  if (const auto problem = launch_problem_before_mpi(read_launch_env(), mpi_library())) {
    std::fprintf(stderr, "mnist_ddp: error: %s\n", problem->c_str());
    return kExitUserError;
  }
  return kExitOk;
}

int exit_status_of(int rank, const std::function<int()>& body,
                   const std::function<void(const std::string&)>& on_failure) {
  try {
    return body();
  } catch (const AgreedExit& e) {
    // Every rank agreed to stop (the agreement threw on all of them; run()'s objects are gone):
    // from now on the launcher's SIGTERM (it ends the others when the first rank exits non-zero)
    // is no failure to dump, only this exit a moment early. main's barrier keeps any rank from
    // exiting before every rank got here.
    decide_exit(e.code);
    return e.code;
  } catch (const UserError& e) {
    // A user error outside an agreement point (all ranks hit it together, e.g. the replica
    // check or a desync): rank 0 reports.
    on_failure(std::string("error: ") + e.what());
    if (rank == 0) std::fprintf(stderr, "mnist_ddp: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    // Unexpected on this rank only: the others may be inside a collective, so end the whole job.
    // (fail_internal runs the fatal hook: the flight recorder dumps there.)
    fail_internal(e.what(), __FILE__, __LINE__);
  }
}

std::optional<Identity> identify(int rank, int world, const MpiLocality& locality,
                                 const std::string& host, int* exit_code) {
  const EnvMap env = read_launch_env();
  try {
    return derive_identity(rank, world, locality, env, host, static_cast<long>(getpid()));
  } catch (const UserError& e) {
    // The launcher and MPI disagree, so MPI cannot coordinate who reports: the task Slurm/Open MPI
    // calls 0 does (or every process when that is unknown).
    const auto it = env.find("SLURM_PROCID");
    if (it == env.end() || it->second == "0") {
      std::fprintf(stderr, "mnist_ddp: error: %s\n", e.what());
    }
    *exit_code = e.exit_code();
    return std::nullopt;
  }
}

bool configure(Comm& control, const Identity& id, int argc, char** argv, Config& cfg) {
  ParseOutcome outcome = ParseOutcome::Run;
  std::string given;  // the flags set on the command line or in --config
  // Each run_agreed is one small all-reduce after a phase that can fail on some ranks only (a
  // file missing on one node, a node without GPUs): all ranks stop together, one prints.
  // The launcher's local rank is checked here, inside the agreement: the node-local group size
  // differs from node to node, so it can fail on some ranks only.
  run_agreed(control, [&] {
    check_local_rank(id);
    outcome = parse_cli(argc, argv, cfg, id.rank == 0, &given);
  });
  if (outcome == ParseOutcome::Run && !cfg.write_config.empty()) {
    write_config_file(control, cfg, given);  // collective (agreement): rank 0 writes
    return false;
  }
  // The requeue signal stops like SIGTERM (checkpoint at the next step boundary).
  install_requeue_handler(cfg.train.stop.requeue_signal);
  return outcome == ParseOutcome::Run;
}

Placement place(Comm& control, const Config& cfg, const Identity& id, const std::string& host) {
  Placement p;
  run_agreed(control, [&] {
    p.device = resolve_device(cfg.device);
    check_flags_for_device(cfg, p.device, mpi_thread_multiple());
  });
  // GPU pinning comes before any other CUDA call that touches a device (docs/DESIGN.md §3).
  p.device_text = to_string(p.device);
  p.plan = plan_communication(cfg, p.device, id.world);
  if (p.device == Device::Cuda) {
    int gpu = 0;
    run_agreed(control, [&] {
      gpu = choose_gpu(id.local_rank, id.local_size, cuda_device_count(), p.plan.nccl());
    });
    cuda_plugin().use_device(gpu);
    p.device_text = fmt::format("cuda:{} {}", gpu, cuda_plugin().device_description(gpu));
  }
  // Collective: every rank's placement (rank, local rank, host, pid, device with its PCI bus id)
  // in one allgather; rank 0 prints it as one table, and with NCCL every rank reaches the same
  // verdict on the one-GPU-per-rank rule from the same records.
  p.ranks = gather_placements(control,
                              RankPlacement{id.rank, id.local_rank, host, id.pid, p.device_text});
  if (p.plan.nccl()) check_gpus_exclusive(p.ranks);
  p.threads =
      cfg.threads > 0 ? cfg.threads : std::max(1, usable_cores() / std::max(1, id.local_size));
  return p;
}

int print_env(const Identity& id, const Placement& where, const std::string& host) {
  std::string out;
  for (const auto& line : id.derivation) out += fmt::format("[rank {}] {}\n", id.rank, line);
  out += fmt::format("[rank {}] host {} pid {} device {} threads {} (usable cores {})\n", id.rank,
                     host, id.pid, to_string(where.device), where.threads, usable_cores());
  if (where.device == Device::Cuda) {
    out += fmt::format("[rank {}] {}\n", id.rank, where.device_text);
    for (const auto& line : cuda_plugin().library_versions())
      out += fmt::format("[rank {}] {}\n", id.rank, line);
  }
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  return kExitOk;
}

int verify_checkpoint_dir(Comm& control, const std::string& dir) {
  float bad = 0;
  // Collective (agreement): a missing directory on rank 0 is one error, every rank exits.
  run_agreed(control, [&] {
    if (control.rank() != 0) return;
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
  control.allreduce(std::span<float>(&bad, 1), ReduceOp::Max);
  // Every rank has the verdict: its exit is decided (a damaged file's exit 2 must not read as a
  // crash when the launcher ends the slower ranks).
  const int code = bad > 0 ? kExitUserError : kExitOk;
  decide_exit(code);
  return code;
}

LogDirClaim claim_log_dir(Comm& control, const Config& cfg) {
  LogDirClaim claim;
  const bool visits = cfg.dry_run || cfg.eval_only || cfg.print_env || cfg.verify_checkpoints;
  claim.visiting = visits;
  std::vector<std::string> notes;
  // Collective (agreement): a directory held by another run is one error, on every rank.
  run_agreed(control, [&] {
    if (control.rank() != 0) return;
    if (visits) {
      claim.held_by = DirLock::holder_if_held(cfg.log_dir, kLogDir);
    } else {
      claim.lock = DirLock::acquire(cfg.log_dir, &notes, kLogDir);
    }
  });
  for (const auto& n : notes) std::fprintf(stderr, "mnist_ddp: warning: %s\n", n.c_str());
  if (!visits) return claim;
  // Collective: every rank learns whether it may write there (its flight recorder among them).
  std::vector<std::string> held = gather_strings(control, claim.held_by);
  claim.held_by = held.empty() ? "" : held.front();
  if (control.rank() == 0 && !claim.held_by.empty()) {
    std::fprintf(stderr, "mnist_ddp: warning: --log-dir %s is in use (%s): this %s%s\n",
                 cfg.log_dir.c_str(), claim.held_by.c_str(),
                 cfg.dry_run ? "dry run" : (cfg.eval_only ? "evaluation" : "check"),
                 cfg.dry_run ? " prints to the console only, and a run started now with this "
                               "--log-dir would be refused: pass another --log-dir"
                             : " leaves its files alone and prints to the console only");
  }
  return claim;
}

std::unique_ptr<DirLock> lock_checkpoint_dir(Comm& control, const Config& cfg) {
  std::unique_ptr<DirLock> lock;
  if (cfg.eval_only || cfg.verify_checkpoints || cfg.print_env) return lock;
  std::vector<std::string> notes;
  // Collective (agreement): a directory held by another run is one error, on every rank.
  // --dry-run: the same verdict, the lock not taken.
  run_agreed(control, [&] {
    if (control.rank() != 0) return;
    if (cfg.dry_run) {
      DirLock::check(cfg.train.checkpoint.dir, &notes);
    } else {
      lock = DirLock::acquire(cfg.train.checkpoint.dir, &notes);
    }
  });
  for (const auto& n : notes) std::fprintf(stderr, "mnist_ddp: warning: %s\n", n.c_str());
  return lock;
}

void announce(const Placement& where, int rank) {
  if (rank == 0) {
    std::fputs(placement_table(where.ranks).c_str(), stdout);
    std::fflush(stdout);
  }
  set_compute_threads(where.threads);
}

std::unique_ptr<Logger> open_log(Comm& control, const Config& cfg, const Identity& id,
                                 const LogDirClaim& logs) {
  std::unique_ptr<Logger> log;
  run_agreed(control, [&] {
    const bool tty = cfg.progress == Progress::On ||
                     (cfg.progress == Progress::Auto && isatty(fileno(stdout)) != 0);
    // Every run appends after the records of the runs before it in this directory (a resumed
    // run continues its lineage there, a new one starts another), unless --clear-logs; a dry run
    // appends to the log only (metrics.jsonl stays as the last run left it), and a visitor
    // beside a running job writes nothing there.
    const LogFiles files = !logs.files()                    ? LogFiles::None
                           : cfg.clear_logs && !cfg.dry_run ? LogFiles::Truncate
                                                            : LogFiles::Append;
    log = std::make_unique<Logger>(id.rank, cfg.log_dir, tty, files, !cfg.dry_run);
  });
  // Before any training: a checkpoint directory that cannot be written is an error now, not
  // after an hour of lost work (a dry run checks without creating or writing anything).
  bool created = false;
  run_agreed(control, [&] {
    if (id.rank != 0 || cfg.eval_only) return;
    if (cfg.dry_run) {
      created = check_checkpoint_dir(cfg.train.checkpoint.dir);
    } else {
      prepare_checkpoint_dir(cfg.train.checkpoint.dir);
    }
  });
  if (created) {
    log->info(fmt::format("dry run: --checkpoint-dir {} does not exist yet; a run creates it",
                          cfg.train.checkpoint.dir));
  }
  log->file(fmt::format("mnist_ddp {} world {} launcher {} nodes {}", kVersion, id.world,
                        id.launcher, id.num_nodes));
  log->file("config: " + config_json(cfg));
  return log;
}

void check_trace_target(Comm& control, const Config& cfg) {
  if (cfg.trace.empty()) return;  // the same on every rank: no collective is skipped by some
  // Collective (agreement): every rank learns whether rank 0 can write the file.
  run_agreed(control, [&] {
    if (control.rank() == 0) check_trace_path(cfg.trace);
  });
}

DataSplit load_data(Comm& control, const Config& cfg, const Identity& id, const Placement& where,
                    Logger& log) {
  DataSplit data;
  run_agreed(control, [&] { data = load_data_dir(cfg.data_dir); });
  std::string kernels =
      where.device == Device::Cuda
          // layer1 (one input channel): CudaOps' direct FP32 kernels unless --amp
          ? (cfg.train.gradients.amp != AmpMode::Off ? "cuDNN 16-bit kernels"
             : cfg.backend.gpu_kernels == GpuKernels::Own
                 ? "direct FP32 layer1, own TF32 layer2 weight gradient, cuDNN with TF32 allowed"
             : cfg.backend.tf32 ? "direct FP32 layer1, cuDNN with TF32 allowed"
                                : "direct FP32 layer1, cuDNN FP32")
          : cfg.backend.cpu_kernels == CpuKernels::OneDnn ? "oneDNN kernels" : "reference kernels";
  DnnlLayout dnnl;
  if (where.device == Device::Cpu && cfg.backend.cpu_kernels == CpuKernels::OneDnn) {
    // What oneDNN runs here (its JIT kernels want the CPU's vector width as the channel block).
    run_agreed(control, [&] { dnnl = dnnl_layout(cfg.train.gradients.amp); });
    if (cfg.train.gradients.amp == AmpMode::Bf16 && !dnnl.bf16.empty()) {
      kernels +=
          fmt::format(" (--amp bf16 on {}): {} on nChw{}c", dnnl.bf16_units, dnnl.bf16, dnnl.block);
    } else {
      kernels += fmt::format(": {} on nChw{}c", dnnl.convolution, dnnl.block);
      if (!dnnl.own.empty()) kernels += "; " + dnnl.own;
    }
  }
  log.info(fmt::format(
      "mnist_ddp {}: {} rank(s) on {} node(s), device {} ({}), {} "
      "thread(s)/rank",
      kVersion, id.world, id.num_nodes, to_string(where.device), kernels, where.threads));
  if (where.device == Device::Cpu) log.info("cpu: " + cpu_kernel_description());
  if (dnnl.convolution.find("ref") != std::string::npos) {
    log.warn(
        fmt::format("oneDNN has no JIT convolution for this CPU ({}): its reference convolution is "
                    "far slower than --cpu-kernels reference (im2col + OpenBLAS); pass that",
                    dnnl.convolution));
  }
  if (cfg.train.gradients.amp == AmpMode::Off && dnnl.bf16_units == "AMX-BF16") {
    log.info(
        "note: this CPU has AMX-BF16 units, idle in fp32 training: --amp bf16 runs the "
        "convolutions on them (fp32 accumulation and master weights; docs/gpu.md, "
        "docs/performance.md)");
  }
  log.info(fmt::format(
      "data: {} from {} ({} train, {} test, labels crc32 {:08x}, mean {:.4f} "
      "std {:.4f})",
      data.name, data.dir, data.train.count, data.test.count, data.crc32, data.mean, data.std));
  return data;
}

std::unique_ptr<Ops> make_device_ops(Communicators& comms, const Config& cfg,
                                     const Placement& where, const DataSplit& data) {
  std::unique_ptr<Ops> ops;
  // The GPU backend through the plugin's one object; the CPU's from the registry.
  run_agreed(comms.control(), [&] {
    ops = where.device == Device::Cuda ? cuda_plugin().make_cuda_ops(cfg.backend)
                                       : make_cpu_backend(cfg.backend);
  });
  // NCCL joins the ops' stream by events (no host sync), so a step can be captured as a graph.
  comms.bind_model(where.plan, ops->stream());
  ops->load_dataset(Ops::kTrainSplit, data.train);  // once: device-resident on a GPU
  ops->load_dataset(Ops::kEvalSplit, data.test);
  return ops;
}

void open_extra_communicators(Communicators& comms, const Config& cfg, const Identity& id,
                              const Placement& where, Ops& ops, Logger& log) {
  if (where.plan.local_sgd != LocalSgdComm::None) {
    int color = id.node;
    run_agreed(comms.control(), [&] {
      if (const std::optional<int> k = ranks_per_node_seam()) color = id.rank / *k;  // test seam
    });
    // Collective: every rank names its node (color).
    comms.open_local(where.plan, color, ops.stream());
    log.info(fmt::format(
        "post-local SGD: global gradient all-reduce for {} steps, then within groups of {} "
        "rank(s) (node-local), parameters averaged over all {} ranks every {} steps",
        cfg.train.gradients.local_sgd.start, comms.local()->size(), id.world,
        cfg.train.gradients.local_sgd.period));
  }
  if (where.plan.thread_engine) {
    comms.open_thread();  // collective: the thread's own duplicate of the world
    log.info(
        "communication thread: on (the bucket all-reduces run on its own duplicate of the "
        "world)");
  }
}

}  // namespace mnist_ddp
