// placement_test.cpp — the start-up placement allgather under mpirun: every rank gets every
// rank's record in rank order (its own pid at its own index), and the GPU check reaches the same
// verdict on every rank from the same records.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>

#include "mnist_ddp/comm/agree.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/launch/identity.hpp"
#include "mnist_ddp/launch/placement.hpp"

namespace mnist_ddp {
namespace {

TEST(Placement, GatherIsInRankOrderOnEveryRank) {
  auto world = make_mpi_comm();
  const int r = world->rank(), n = world->size();
  RankPlacement me;
  me.rank = r;
  me.local_rank = r;
  me.host = host_name();
  me.pid = static_cast<long>(getpid());
  // Every rank claims "GPU" r % 2 on this host: from 3 ranks on, two share one.
  me.device = "cuda:0 Fake GPU (pci 0000:0" + std::to_string(r % 2) + ":00.0)";
  const auto all = gather_placements(*world, me);
  ASSERT_EQ(static_cast<int>(all.size()), n);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(all[i].rank, i);
    EXPECT_EQ(all[i].host, me.host);
  }
  EXPECT_EQ(all[r].pid, me.pid);
  EXPECT_EQ(all[r].device, me.device);
  bool refused = false;
  try {
    check_gpus_exclusive(all);
  } catch (const UserError& e) {
    refused = std::string(e.what()).find("ranks 0 and 2") != std::string::npos;
  }
  EXPECT_EQ(refused, n >= 3);
}

}  // namespace
}  // namespace mnist_ddp
