// flag_rules.cpp — the values and flag combinations mnist_ddp refuses, as two tables: those
// refused whatever the device (checked right after parsing), and those the resolved device cannot
// run (checked once the device is known). Each rule is a predicate and the one error that names
// the flags and the fix; the first rule that applies is reported.
#include "mnist_ddp/app/flag_rules.hpp"
#include "mnist_ddp/comm/compress.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/process/signals.hpp"
#include "mnist_ddp/trace/trace.hpp"
#include "mnist_ddp/train/test_seams.hpp"

namespace mnist_ddp {
namespace {

struct FlagRule {
  bool (*refused)(const Config& cfg);
  std::string (*error)(const Config& cfg);
};

const FlagRule kFlagRules[] = {
    {[](const Config& cfg) {
       return cfg.dry_run && (!cfg.write_config.empty() || cfg.print_env || cfg.verify_checkpoints);
     },
     [](const Config& cfg) -> std::string {
       return fmt::format(
           "--dry-run checks a run before it trains; {} trains nothing to check: drop one of them",
           !cfg.write_config.empty() ? "--write-config"
           : cfg.print_env           ? "--print-env"
                                     : "--verify-checkpoints");
     }},
    {[](const Config& cfg) {
       return cfg.backend.gpu_kernels == GpuKernels::Own && !cfg.backend.tf32;
     },
     [](const Config& cfg) -> std::string {
       return "--gpu-kernels own runs layer2's weight gradient on TF32 tensor cores, which "
              "--tf32 off forbids: drop --tf32 off, or use --gpu-kernels cudnn for full FP32";
     }},
    {[](const Config& cfg) {
       return cfg.backend.gpu_kernels == GpuKernels::Own && cfg.train.gradients.amp != AmpMode::Off;
     },
     [](const Config& cfg) -> std::string {
       return fmt::format(
           "--gpu-kernels own is an FP32/TF32 kernel; with --amp {} the convolutions run on "
           "cuDNN's 16-bit kernels: drop --amp, or drop --gpu-kernels own",
           name_in(kAmpModeNames, cfg.train.gradients.amp));
     }},
    {[](const Config& cfg) { return cfg.clear_logs && cfg.resume != "none"; },
     [](const Config& cfg) -> std::string {
       return fmt::format(
           "--clear-logs empties --log-dir's files for a new run; --resume {} continues a run "
           "whose records are there: drop --clear-logs (or start the new run in another "
           "--log-dir)",
           cfg.resume);
     }},
    {[](const Config& cfg) { return cfg.train.checkpoint.keep_best && cfg.eval_only; },
     [](const Config& cfg) -> std::string {
       return "--keep-best keeps a training run's best checkpoint; --eval-only trains nothing: "
              "drop --keep-best (--eval-only --resume best evaluates the kept one)";
     }},
    {[](const Config& cfg) { return !cfg.init_weights.empty() && cfg.eval_only; },
     [](const Config& cfg) -> std::string {
       return "--init-weights starts training from a model; to evaluate one, use --eval-only "
              "--resume PATH";
     }},
    {[](const Config& cfg) { return !cfg.init_weights.empty() && cfg.resume != "none"; },
     [](const Config& cfg) -> std::string {
       return "--init-weights starts a new run from a model, --resume continues a run: use one of "
              "them";
     }},
    {[](const Config& cfg) { return cfg.eval_only && cfg.resume == "none"; },
     [](const Config& cfg) -> std::string {
       return "--eval-only evaluates a checkpoint: give it one with --resume PATH (or --resume "
              "auto to take the newest in --checkpoint-dir)";
     }},
    {[](const Config& cfg) { return cfg.flight_dump_signal == cfg.train.stop.requeue_signal; },
     [](const Config& cfg) -> std::string {
       return fmt::format(
           "--flight-dump-signal {0} and --requeue-signal {0}: one signal cannot both dump the "
           "flight recorder and stop the run; give them different signals (defaults: USR2, USR1)",
           signal_flag_name(cfg.flight_dump_signal));
     }},
    {[](const Config& cfg) {
       return !cfg.trace_steps.empty() && !parse_trace_window(cfg.trace_steps);
     },
     [](const Config& cfg) -> std::string {
       return fmt::format(
           "--trace-steps {}: give A:B, two step numbers with 0 <= A < B (e.g. --trace-steps "
           "100:150)",
           cfg.trace_steps);
     }},
    {[](const Config& cfg) { return !cfg.trace_steps.empty() && cfg.trace.empty(); },
     [](const Config& cfg) -> std::string {
       return "--trace-steps bounds the timeline of --trace FILE: add --trace FILE";
     }},
    {[](const Config& cfg) { return cfg.train.seams.desync_rank >= 0 && !cfg.debug_collectives; },
     [](const Config& cfg) -> std::string {
       return "--debug-desync-rank makes the ranks' collectives disagree, which only "
              "--debug-collectives catches (without it MPI's behaviour is undefined): add "
              "--debug-collectives";
     }},
    {[](const Config& cfg) { return cfg.train.schedule.accumulate > 1 && cfg.eval_only; },
     [](const Config& cfg) -> std::string {
       return fmt::format(
           "--accumulate {} shapes training steps; --eval-only trains nothing: drop one of them",
           cfg.train.schedule.accumulate);
     }},
    {[](const Config& cfg) {
       return static_cast<std::int64_t>(cfg.train.schedule.batch_size) *
                  cfg.train.schedule.accumulate >
              (std::int64_t{1} << 24);
     },
     [](const Config& cfg) -> std::string {
       return fmt::format(
           "--batch-size {} x --accumulate {} = {} images per rank per step is more than any "
           "dataset holds (at most 16777216); lower one of them",
           cfg.train.schedule.batch_size, cfg.train.schedule.accumulate,
           static_cast<std::int64_t>(cfg.train.schedule.batch_size) *
               cfg.train.schedule.accumulate);
     }},
    {[](const Config& cfg) {
       return cfg.train.optimizer.sgd.nesterov &&
              (cfg.train.optimizer.sgd.momentum <= 0 || cfg.train.optimizer.sgd.dampening != 0);
     },
     [](const Config& cfg) -> std::string {
       return "--nesterov needs --momentum > 0 and --dampening 0 (as torch.optim.SGD)";
     }},
};

// Why a run that did not ask for the CPU is on it, for the errors of flags the CPU cannot run.
std::string why_cpu(const Config& cfg) {
  return cfg.device == DeviceChoice::Auto ? " (--device auto found no usable GPU)" : "";
}

struct DeviceFlagRule {
  bool (*refused)(const Config& cfg, Device device, bool thread_multiple);
  std::string (*error)(const Config& cfg, Device device);
};

const DeviceFlagRule kDeviceFlagRules[] = {
    {[](const Config& cfg, Device device, bool thread_multiple) {
       return device == Device::Cuda && is_powersgd(cfg.train.gradients.compression);
     },
     [](const Config& cfg, Device device) -> std::string {
       return fmt::format(
           "--compression {}: PowerSGD runs on the CPU backend only in this version; use --device "
           "cpu, or --compression none|fp16|bf16 on the GPU",
           to_string(cfg.train.gradients.compression));
     }},
    {[](const Config& cfg, Device device, bool thread_multiple) {
       return device == Device::Cuda && cfg.train.gradients.compression != Compression::None &&
              cfg.comm == CommChoice::Mpi;
     },
     [](const Config& cfg, Device device) -> std::string {
       return fmt::format(
           "--compression {} with --comm mpi on a GPU: the GPU hooks encode and sum on NCCL's "
           "stream; use --comm nccl (one GPU per rank), or --compression none",
           to_string(cfg.train.gradients.compression));
     }},
    {[](const Config& cfg, Device device, bool thread_multiple) {
       return cfg.overlap_engine == OverlapEngine::Thread && !thread_multiple;
     },
     [](const Config& cfg, Device device) -> std::string {
       return "--overlap-engine thread: this MPI library does not provide MPI_THREAD_MULTIPLE; use "
              "--overlap-engine poll";
     }},
    {[](const Config& cfg, Device device, bool thread_multiple) {
       return cfg.overlap_engine == OverlapEngine::Thread && device == Device::Cuda;
     },
     [](const Config& cfg, Device device) -> std::string {
       return "--overlap-engine thread: the communication thread is the CPU backend's; on the GPU "
              "the bucket all-reduces overlap backward on NCCL's own stream (drop the flag)";
     }},
    {[](const Config& cfg, Device device, bool thread_multiple) {
       return cfg.overlap_engine == OverlapEngine::Thread &&
              cfg.train.gradients.local_sgd.start >= 0;
     },
     [](const Config& cfg, Device device) -> std::string {
       return "--overlap-engine thread with --local-sgd-start: the communication thread reduces "
              "over the whole job only; use --overlap-engine poll for post-local SGD";
     }},
    {[](const Config& cfg, Device device, bool thread_multiple) {
       return cfg.backend.gpu_kernels == GpuKernels::Own && device == Device::Cpu;
     },
     [](const Config& cfg, Device device) -> std::string {
       return fmt::format(
           "--gpu-kernels own chooses a GPU kernel; this run is on the CPU{}: drop --gpu-kernels, "
           "or run on a GPU with --device cuda",
           why_cpu(cfg));
     }},
    {[](const Config& cfg, Device device, bool thread_multiple) {
       return cfg.train.gradients.amp == AmpMode::Fp16 && device == Device::Cpu;
     },
     [](const Config& cfg, Device device) -> std::string {
       return fmt::format(
           "--amp fp16: this run is on the CPU{}, which has no fp16 training units; use --amp "
           "bf16 (CPUs with AVX512-BF16 or AMX), drop --amp, or run on a GPU with --device cuda",
           why_cpu(cfg));
     }},
    {[](const Config& cfg, Device device, bool thread_multiple) {
       return cfg.train.gradients.amp == AmpMode::Bf16 && device == Device::Cpu &&
              cfg.backend.cpu_kernels == CpuKernels::Reference;
     },
     [](const Config& cfg, Device device) -> std::string {
       return "--amp bf16 on the CPU runs on oneDNN's bf16 kernels; drop --cpu-kernels reference "
              "(or drop --amp)";
     }},
    {[](const Config& cfg, Device device, bool thread_multiple) {
       return cfg.train.gradients.local_sgd.start >= 0 && device == Device::Cuda &&
              cfg.comm == CommChoice::Mpi;
     },
     [](const Config& cfg, Device device) -> std::string {
       return "--local-sgd-start with --comm mpi on a GPU: the node-local groups are NCCL "
              "communicators; use --comm nccl (one GPU per rank)";
     }},
    {[](const Config& cfg, Device device, bool thread_multiple) {
       return cfg.train.gradients.local_sgd.start >= 0 &&
              cfg.train.gradients.compression != Compression::None;
     },
     [](const Config& cfg, Device device) -> std::string {
       return fmt::format(
           "--local-sgd-start with --compression {}: post-local SGD uses the plain all-reduce (as "
           "PyTorch's post_localSGD_hook); drop one of the two",
           to_string(cfg.train.gradients.compression));
     }},
    {[](const Config& cfg, Device device, bool thread_multiple) {
       return device == Device::Cpu && cfg.comm == CommChoice::Nccl;
     },
     [](const Config& cfg, Device device) -> std::string {
       return "--comm nccl works on GPU memory: use it with --device cuda (or --comm mpi)";
     }},
};

}  // namespace

void check_flag_rules(const Config& cfg) {
  for (const FlagRule& r : kFlagRules)
    if (r.refused(cfg)) throw UserError(r.error(cfg));
}

void check_flags_for_device(const Config& cfg, Device device, bool thread_multiple) {
  for (const DeviceFlagRule& r : kDeviceFlagRules)
    if (r.refused(cfg, device, thread_multiple)) throw UserError(r.error(cfg, device));
}

}  // namespace mnist_ddp
