// plan_communication_test.cpp — the communication plan over the flag combinations that change it:
// which communicator carries the gradients, whether the CPU's communication thread runs (never when
// nothing would use it: PowerSGD, --no-overlap), post-local SGD's group communicator, and whether
// a GPU step is captured in CUDA graphs, with the reason whenever it is not.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/app/plan_communication.hpp"
#include "mnist_ddp/comm/local_sgd.hpp"
#include "test_util.hpp"

namespace mnist_ddp {
namespace {

using testing::parse_flags;

bool mentions(const std::string& why, const char* what) {
  return why.find(what) != std::string::npos;
}

TEST(CommPlan, CpuRunsReduceOverMpiWithoutGraphs) {
  const CommPlan p = plan_communication(parse_flags({}), Device::Cpu, 4);
  EXPECT_EQ(p.gradients, GradientComm::Mpi);
  EXPECT_FALSE(p.device_reducer());
  EXPECT_FALSE(p.nccl());
  EXPECT_FALSE(p.thread_engine);
  EXPECT_EQ(p.why_no_thread, "");
  EXPECT_EQ(p.local_sgd, LocalSgdComm::None);
  EXPECT_FALSE(p.graphs);
  EXPECT_EQ(p.why_no_graphs, "");  // graphs are not a CPU's to miss
  // --comm mpi or nccl is the GPU's choice: the CPU reduces over MPI either way.
  EXPECT_EQ(plan_communication(parse_flags({"--comm", "nccl"}), Device::Cpu, 2).gradients,
            GradientComm::Mpi);
}

TEST(CommPlan, TheThreadRunsOnlyWhenItCarriesTheBuckets) {
  const CommPlan on =
      plan_communication(parse_flags({"--overlap-engine", "thread"}), Device::Cpu, 2);
  EXPECT_TRUE(on.thread_engine);
  EXPECT_EQ(on.why_no_thread, "");
  EXPECT_EQ(on.gradients, GradientComm::Mpi);
  // PowerSGD reduces whole buckets after backward on the training thread: a thread would idle
  // (it used to be opened anyway).
  for (const char* hook : {"powersgd", "powersgd_fp16", "batched_powersgd_fp16"}) {
    const CommPlan p = plan_communication(
        parse_flags({"--overlap-engine", "thread", "--compression", hook}), Device::Cpu, 2);
    EXPECT_FALSE(p.thread_engine) << hook;
    EXPECT_TRUE(mentions(p.why_no_thread, "PowerSGD")) << hook << ": " << p.why_no_thread;
  }
  // The fp16/bf16 hooks encode per bucket: the thread carries them.
  EXPECT_TRUE(
      plan_communication(parse_flags({"--overlap-engine", "thread", "--compression", "fp16"}),
                         Device::Cpu, 2)
          .thread_engine);
  const CommPlan after = plan_communication(
      parse_flags({"--overlap-engine", "thread", "--no-overlap"}), Device::Cpu, 2);
  EXPECT_FALSE(after.thread_engine);
  EXPECT_TRUE(mentions(after.why_no_thread, "--no-overlap")) << after.why_no_thread;
}

TEST(CommPlan, PostLocalSgdGroupsReduceWhereTheGradientsLive) {
  const Config c = parse_flags({"--local-sgd-start", "5"});
  EXPECT_EQ(plan_communication(c, Device::Cpu, 4).local_sgd, LocalSgdComm::MpiGroup);
  const CommPlan gpu = plan_communication(c, Device::Cuda, 4);
  EXPECT_EQ(gpu.local_sgd, LocalSgdComm::NcclGroup);
  EXPECT_FALSE(gpu.graphs);
  EXPECT_TRUE(mentions(gpu.why_no_graphs, "post-local SGD")) << gpu.why_no_graphs;
}

TEST(CommPlan, GpuGradientsTakeNcclUnlessCommMpi) {
  for (const char* comm : {"auto", "nccl"}) {
    const CommPlan p = plan_communication(parse_flags({"--comm", comm}), Device::Cuda, 8);
    EXPECT_EQ(p.gradients, GradientComm::Nccl) << comm;
    EXPECT_TRUE(p.nccl());
    EXPECT_TRUE(p.device_reducer());
    EXPECT_TRUE(p.graphs) << comm;
    EXPECT_EQ(p.why_no_graphs, "");
    EXPECT_FALSE(p.thread_engine);
  }
  const CommPlan staged = plan_communication(parse_flags({"--comm", "mpi"}), Device::Cuda, 2);
  EXPECT_EQ(staged.gradients, GradientComm::HostStagedMpi);
  EXPECT_FALSE(staged.nccl());
  EXPECT_TRUE(staged.device_reducer());  // the staged communicator takes device memory
  EXPECT_FALSE(staged.graphs);
  EXPECT_TRUE(mentions(staged.why_no_graphs, "--comm mpi with several ranks"))
      << staged.why_no_graphs;
  // Alone, the staged all-reduce is a device-side division: capturable (a world of one once got
  // graphs without the device Reducer and crashed at its first step).
  const CommPlan alone = plan_communication(parse_flags({"--comm", "mpi"}), Device::Cuda, 1);
  EXPECT_EQ(alone.gradients, GradientComm::HostStagedMpi);
  EXPECT_TRUE(alone.device_reducer());
  EXPECT_TRUE(alone.graphs);
}

TEST(CommPlan, EveryReasonGraphsAreOffIsNamed) {
  struct Case {
    std::vector<std::string> flags;
    const char* why;
  };
  for (const Case& k : std::vector<Case>{{{"--sync-bn"}, "--sync-bn"},
                                         {{"--local-sgd-start", "0"}, "post-local SGD"},
                                         {{"--debug-collectives"}, "--debug-collectives"},
                                         {{"--comm", "mpi"}, "--comm mpi"}}) {
    const CommPlan p = plan_communication(parse_flags(k.flags), Device::Cuda, 2);
    EXPECT_FALSE(p.graphs) << k.why;
    EXPECT_TRUE(mentions(p.why_no_graphs, k.why)) << k.why << ": " << p.why_no_graphs;
  }
  // Asked off: off, and nothing to explain.
  const CommPlan off = plan_communication(parse_flags({"--cuda-graphs", "off"}), Device::Cuda, 2);
  EXPECT_FALSE(off.graphs);
  EXPECT_EQ(off.why_no_graphs, "");
  EXPECT_EQ(off.gradients, GradientComm::Nccl);
}

}  // namespace
}  // namespace mnist_ddp

namespace mnist_ddp {
namespace {

// Post-local SGD's schedule: global gradient averages before --local-sgd-start, node-local from
// it on, and a global parameter average after every --local-sgd-period-th step from it on.
TEST(LocalSgdSchedule, GlobalThenLocalWithPeriodicAverages) {
  const LocalSgdSchedule off;
  EXPECT_FALSE(off.on());
  EXPECT_FALSE(off.local_at(0));
  EXPECT_FALSE(off.average_after(100));
  const LocalSgdSchedule s{10, 4};
  EXPECT_TRUE(s.on());
  EXPECT_FALSE(s.local_at(9));
  EXPECT_TRUE(s.local_at(10));
  std::vector<std::int64_t> averaged;
  for (std::int64_t step = 0; step < 24; ++step)
    if (s.average_after(step)) averaged.push_back(step);
  EXPECT_EQ(averaged, (std::vector<std::int64_t>{10, 14, 18, 22}));
  const LocalSgdSchedule from0{0, 1};  // every step local, averaged every step
  EXPECT_TRUE(from0.local_at(0) && from0.average_after(0) && from0.average_after(7));
}

}  // namespace
}  // namespace mnist_ddp
