// plan_communication.cpp — the communication plan: every choice of communicator and step capture,
// with the reason when a requested path is not taken.
#include "mnist_ddp/app/plan_communication.hpp"
#include "mnist_ddp/comm/compress.hpp"

namespace mnist_ddp {

CommPlan plan_communication(const Config& cfg, Device device, int world_size) {
  CommPlan p;
  if (device == Device::Cpu) {
    p.gradients = GradientComm::Mpi;
    p.local_sgd =
        cfg.train.gradients.local_sgd.start >= 0 ? LocalSgdComm::MpiGroup : LocalSgdComm::None;
    if (cfg.overlap_engine == OverlapEngine::Thread) {
      if (!cfg.train.gradients.overlap) {
        p.why_no_thread = "--no-overlap reduces after backward, on the training thread";
      } else if (is_powersgd(cfg.train.gradients.compression)) {
        p.why_no_thread =
            "PowerSGD compresses and reduces whole buckets after backward on the training thread";
      } else {
        p.thread_engine = true;
      }
    }
    return p;  // graphs are the GPU's
  }
  p.gradients = cfg.comm == CommChoice::Mpi ? GradientComm::HostStagedMpi : GradientComm::Nccl;
  p.local_sgd =
      cfg.train.gradients.local_sgd.start >= 0 ? LocalSgdComm::NcclGroup : LocalSgdComm::None;
  if (!cfg.cuda_graphs) return p;
  if (cfg.train.gradients.sync_bn) {
    p.why_no_graphs =
        "--sync-bn exchanges BN statistics through the host inside the step (a step's "
        "collectives differ from step to step or need the host)";
  } else if (cfg.train.gradients.local_sgd.start >= 0) {
    p.why_no_graphs =
        "post-local SGD switches groups and averages parameters every period (a step's "
        "collectives differ from step to step or need the host)";
  } else if (cfg.debug_collectives) {
    p.why_no_graphs =
        "--debug-collectives compares every collective across ranks on the host, each step";
  } else if (p.gradients == GradientComm::HostStagedMpi && world_size > 1) {
    p.why_no_graphs =
        "the host-staged MPI all-reduce (--comm mpi with several ranks) runs on the host each "
        "step; use --comm nccl for graph replay";
  } else {
    p.graphs = true;
  }
  return p;
}

}  // namespace mnist_ddp
