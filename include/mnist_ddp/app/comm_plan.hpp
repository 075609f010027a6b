// comm_plan.hpp — the run's communication plan, decided in one place from the configuration and
// the placement: which communicator carries the gradients, whether the CPU's communication thread
// runs, which communicator post-local SGD groups use, and whether training steps are captured in
// CUDA graphs (and why not). Every call site that opens a communicator or picks a path reads it.
#pragma once

#include <string>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/runtime/device.hpp"

namespace mnist_ddp {

// Where the gradient buckets are all-reduced.
enum class GradientComm {
  Mpi,            // the CPU backend: MPI on host memory
  Nccl,           // a GPU with --comm auto|nccl: NCCL on device memory
  HostStagedMpi,  // a GPU with --comm mpi: device -> host, MPI, host -> device
};
// Where post-local SGD's node-local groups reduce.
enum class LocalSgdComm { None, MpiGroup, NcclGroup };

struct CommPlan {
  GradientComm gradients = GradientComm::Mpi;
  // The CPU's communication thread carries the buckets (--overlap-engine thread): it gets its own
  // duplicate of the world, opened only when it is used.
  bool thread_engine = false;
  std::string why_no_thread;  // --overlap-engine thread asked for but not used: why; else ""
  LocalSgdComm local_sgd = LocalSgdComm::None;
  bool graphs = false;        // the training step is captured in CUDA graphs
  std::string why_no_graphs;  // --cuda-graphs on, a GPU run, graphs off: why; else ""

  bool device_reducer() const { return gradients != GradientComm::Mpi; }  // device memory
  bool nccl() const { return gradients == GradientComm::Nccl; }
};

// Pure: the plan for this configuration on `device` in a world of `world_size` ranks (the
// host-staged all-reduce needs the host inside each step only when there are peers). The
// configuration has passed check_flags_for_device (no thread engine on a GPU, no PowerSGD on a
// GPU, no thread with post-local SGD).
CommPlan plan_communication(const Config& cfg, Device device, int world_size);

}  // namespace mnist_ddp
