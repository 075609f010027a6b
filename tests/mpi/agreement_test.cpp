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
#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/data/dataset.hpp"
#include "mnist_ddp/dist/comm.hpp"
#include "mnist_ddp/dist/compress.hpp"
#include "mnist_ddp/dist/reducer.hpp"
#include "mnist_ddp/dist/replicas.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/model/rng.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/runtime/agree.hpp"
#include "mnist_ddp/runtime/check.hpp"
#include "mnist_ddp/runtime/identity.hpp"
#include "mnist_ddp/runtime/log.hpp"
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
