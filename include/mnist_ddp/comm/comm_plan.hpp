// comm_plan.hpp — the shape of a run's communication plan: which communicator carries the
// gradients, whether the CPU's communication thread runs, which communicator post-local SGD's
// groups use, and whether training steps are CUDA graphs (and why not). It is decided in one place
// from the configuration (app/plan_communication.hpp plan_communication); the communicators' owner
// opens what it names and the trainer reads it, never deciding again.
#pragma once

#include <string>

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

}  // namespace mnist_ddp
