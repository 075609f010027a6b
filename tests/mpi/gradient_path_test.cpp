// gradient_path_test.cpp — how a run's gradients travel, checked on the CPU under mpirun: the
// communication plan against the real communicators it chooses (device memory and capture agree;
// a capturable host-staged world of one once got the device Reducer's graphs without its device
// path and crashed at the first step); the agreement a failed
// CUDA graph capture relies on; and a communicator's bookkeeping rewound after a step that never
// ran.
#include <gtest/gtest.h>

#include <string>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/app/plan_communication.hpp"
#include "mnist_ddp/comm/agree.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/launch/device.hpp"
#include "mnist_ddp/train/trainer.hpp"

namespace mnist_ddp {
namespace {

TEST(CommPlan, MatchesTheCommunicatorsItOpens) {
  // The plan is pure (tests/unit/plan_communication_test.cpp); here it meets the real communicators
  // it chooses: the Trainer refuses a plan whose device memory or capture disagrees with them.
  Config cfg;  // --cuda-graphs on by default
  auto mpi = make_mpi_comm();
  CommPlan p = plan_communication(cfg, Device::Cpu, mpi->size());
  EXPECT_EQ(p.device_reducer(), mpi->device_memory());
  if (!cuda_built()) GTEST_SKIP() << "built without CUDA: there is no host-staged communicator";

  // --comm mpi on a GPU, this world (2 or 4 ranks): device memory, the host in every step.
  cfg.comm = CommChoice::Mpi;
  auto staged = make_host_staged_comm();
  p = plan_communication(cfg, Device::Cuda, staged->size());
  EXPECT_TRUE(p.device_reducer());
  EXPECT_TRUE(staged->device_memory());
  EXPECT_FALSE(p.graphs);
  EXPECT_FALSE(staged->capturable());

  // The case that crashed: --comm mpi alone (each rank its own group here) is capturable and
  // gets the device Reducer (the staged communicator divides on the device) and graphs.
  auto alone = make_host_staged_group_comm(staged->rank());
  ASSERT_EQ(alone->size(), 1);
  p = plan_communication(cfg, Device::Cuda, alone->size());
  EXPECT_TRUE(p.device_reducer());
  EXPECT_TRUE(alone->device_memory());
  EXPECT_TRUE(p.graphs);
  EXPECT_TRUE(alone->capturable());
}

// A failed capture on some ranks: every rank learns the lowest failing rank and its message.
TEST(Agree, FirstFailureIsReportedAlikeOnEveryRank) {
  auto comm = make_mpi_comm();
  if (comm->size() < 2) GTEST_SKIP() << "needs 2+ ranks";
  EXPECT_EQ(agree_first_failure(*comm, ""), "");
  const int r = comm->rank();
  const std::string mine = r >= 1 ? "CUDA error in call " + std::to_string(r) : "";
  EXPECT_EQ(agree_first_failure(*comm, mine), "rank 1: CUDA error in call 1");
  // A long message arrives cut, never overrunning.
  const std::string longer(1000, 'x');
  const std::string got = agree_first_failure(*comm, r == comm->size() - 1 ? longer : "");
  EXPECT_EQ(got, "rank " + std::to_string(comm->size() - 1) + ": " + std::string(255, 'x'));
}

// Comm::rewind puts the bytes and the collective sequence back (a step whose collectives were
// only captured, never run), so --debug-collectives fingerprints still agree afterwards.
TEST(Agree, RewoundCommunicatorKeepsTheCollectiveSequenceInStep) {
  auto comm = make_mpi_comm();
  comm->set_debug_collectives(true);
  const Comm::Mark before = comm->mark();
  double v = 1;
  comm->allreduce(std::span<double>(&v, 1), ReduceOp::Sum);
  EXPECT_EQ(v, comm->size());
  EXPECT_EQ(comm->mark().collectives, before.collectives + 1);
  EXPECT_EQ(comm->mark().payload_bytes, before.payload_bytes + sizeof(double));
  comm->rewind(before);
  EXPECT_EQ(comm->mark().collectives, before.collectives);
  EXPECT_EQ(comm->mark().payload_bytes, before.payload_bytes);
  // Every rank rewound alike: the next fingerprint check passes (it throws on a mismatch).
  v = 2;
  EXPECT_NO_THROW(comm->allreduce(std::span<double>(&v, 1), ReduceOp::Sum));
  EXPECT_EQ(v, 2.0 * comm->size());
}

}  // namespace
}  // namespace mnist_ddp
