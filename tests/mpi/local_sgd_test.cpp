// local_sgd_test.cpp — post-local SGD's building blocks under mpirun: a group communicator split
// by color, and the reducer switched onto it averaging gradients within the group only.
#include <gtest/gtest.h>

#include <memory>

#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/reducer.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"

namespace mnist_ddp {
namespace {

TEST(LocalSgd, ReducerOnTheGroupAveragesWithinItOnly) {
  auto world = make_mpi_comm();
  const int r = world->rank();
  // Groups of two consecutive ranks, as two "nodes" of two.
  auto group = make_mpi_group_comm(r / 2);
  const int first = (r / 2) * 2, members = group->size();
  EXPECT_EQ(members, std::min(2, world->size() - first));
  EXPECT_EQ(group->rank(), r - first);
  auto ops = make_cpu_backend();
  ConvNet model(*ops, 1);
  Reducer red(*world, model, 25 * 1024, true, Compression::None);
  // Global first, then the group: each rank's gradient is its rank number.
  for (int phase = 0; phase < 2; ++phase) {
    if (phase == 1) red.use_comm(*group);
    for (float& g : model.grads()) g = static_cast<float>(r);
    for (int layer = ConvNet::kLayers - 1; layer >= 0; --layer) red.layer_ready(layer);
    red.finish();
    const float want = phase == 0 ? (world->size() - 1) / 2.0f
                                  : static_cast<float>(2 * first + members - 1) / 2.0f;
    for (float g : model.grads()) ASSERT_EQ(g, want) << "phase " << phase;
  }
}

}  // namespace
}  // namespace mnist_ddp
