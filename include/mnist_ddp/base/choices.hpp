// choices.hpp — the enums the run's flags choose between, with their names (the device, the CPU
// and GPU kernels, the learning-rate schedule, the gradient compression, the overlap engine,
// progress lines, the communicator): vocabulary the layers' option structs are written in
// (app/config.hpp's Config holds every layer's option struct, filled by the flag table,
// app/flags.cpp).
#pragma once

#include <array>

#include "mnist_ddp/base/enum_names.hpp"

namespace mnist_ddp {

enum class DeviceChoice { Cpu, Cuda, Auto };
inline constexpr std::array<NameOf<DeviceChoice>, 3> kDeviceChoiceNames{
    {{DeviceChoice::Cpu, "cpu"}, {DeviceChoice::Cuda, "cuda"}, {DeviceChoice::Auto, "auto"}}};

enum class CpuKernels { OneDnn, Reference };
inline constexpr std::array<NameOf<CpuKernels>, 2> kCpuKernelsNames{
    {{CpuKernels::OneDnn, "onednn"}, {CpuKernels::Reference, "reference"}}};

// Whose kernels run the GPU's convolutions where this project has its own: cuDNN's everywhere
// (but layer1's direct kernels, always), or own: layer2's weight gradient on TF32 tensor cores
// (ops/cuda/wgrad_tf32.cuh), until a GPU run proves it faster and it becomes the default.
enum class GpuKernels { Cudnn, Own };
inline constexpr std::array<NameOf<GpuKernels>, 2> kGpuKernelsNames{
    {{GpuKernels::Cudnn, "cudnn"}, {GpuKernels::Own, "own"}}};

enum class LrSchedule { Constant, Step, Cosine };
inline constexpr std::array<NameOf<LrSchedule>, 3> kLrScheduleNames{
    {{LrSchedule::Constant, "constant"},
     {LrSchedule::Step, "step"},
     {LrSchedule::Cosine, "cosine"}}};

// PowerSgd* are PowerSGD hooks (powersgd.hpp); the others are the 16-bit casts.
enum class Compression { None, Fp16, Bf16, PowerSgd, PowerSgdFp16, BatchedPowerSgdFp16 };
inline constexpr std::array<NameOf<Compression>, 6> kCompressionNames{
    {{Compression::None, "none"},
     {Compression::Fp16, "fp16"},
     {Compression::Bf16, "bf16"},
     {Compression::PowerSgd, "powersgd"},
     {Compression::PowerSgdFp16, "powersgd_fp16"},
     {Compression::BatchedPowerSgdFp16, "batched_powersgd_fp16"}}};

// How a bucket's all-reduce progresses while backward runs (CPU): Poll: a non-blocking
// MPI_Iallreduce that MPI advances inside the MPI_Test calls made from backward's layer-ready
// callbacks; Thread: a communication thread runs a blocking all-reduce per bucket on its own
// communicator (threaded_comm.hpp; needs MPI_THREAD_MULTIPLE).
enum class OverlapEngine { Poll, Thread };
inline constexpr std::array<NameOf<OverlapEngine>, 2> kOverlapEngineNames{
    {{OverlapEngine::Poll, "poll"}, {OverlapEngine::Thread, "thread"}}};

enum class Progress { Auto, On, Off };
inline constexpr std::array<NameOf<Progress>, 3> kProgressNames{
    {{Progress::Auto, "auto"}, {Progress::On, "on"}, {Progress::Off, "off"}}};
enum class CommChoice { Auto, Nccl, Mpi };
inline constexpr std::array<NameOf<CommChoice>, 3> kCommChoiceNames{
    {{CommChoice::Auto, "auto"}, {CommChoice::Nccl, "nccl"}, {CommChoice::Mpi, "mpi"}}};

}  // namespace mnist_ddp
