// agreement_test.cpp — error agreement under mpirun: one failing rank stops every rank with one
// error.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "../common/compare.hpp"
#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/comm/agree.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/compress.hpp"
#include "mnist_ddp/comm/reducer.hpp"
#include "mnist_ddp/comm/replicas.hpp"
#include "mnist_ddp/data/dataset.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/diagnostics/log.hpp"
#include "mnist_ddp/launch/identity.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/train/trainer.hpp"
#include "world.hpp"

namespace mnist_ddp {
namespace {

TEST(Agreement, OneFailingRankStopsEveryRank) {
  const int n = world().size();
  int code = 0;
  try {
    run_agreed(world(), [&] {
      if (world().rank() == n - 1) throw UserError("injected failure on the last rank", 7);
    });
  } catch (const AgreedExit& e) {
    code = e.code;
  }
  EXPECT_EQ(code, 7);
  // And a phase where nobody fails passes on every rank.
  EXPECT_NO_THROW(run_agreed(world(), [] {}));
}

}  // namespace
}  // namespace mnist_ddp
