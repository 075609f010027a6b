// amp_test.cpp — mixed precision on the host: the dynamic loss-scale rule of docs/DESIGN.md §5 (the
// oracle the GPU scaler is checked against in gpu_ops_test.cpp) and --amp on a CPU backend as a
// clear error. (The checkpointed scale: checkpoint_test.cpp.)
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <string>

#include "mnist_ddp/model/amp.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/runtime/check.hpp"

namespace mnist_ddp {
namespace {

TEST(LossScale, DefaultsArePyTorchs) {
  const LossScaleRule r;
  EXPECT_EQ(r.init_scale, 65536.f);
  EXPECT_EQ(r.growth_factor, 2.f);
  EXPECT_EQ(r.backoff_factor, 0.5f);
  EXPECT_EQ(r.growth_interval, 2000);
  EXPECT_EQ(LossScalerState{}.scale, 65536.f);
}

TEST(LossScale, GrowsOnlyAfterAFullIntervalOfCleanSteps) {
  const LossScaleRule r;
  LossScalerState s;
  for (int i = 1; i < 2000; ++i) {
    update_loss_scale(s, false, r);
    ASSERT_EQ(s.scale, 65536.f) << "after " << i << " clean steps";
    ASSERT_EQ(s.growth_tracker, i);
  }
  update_loss_scale(s, false, r);  // the 2000th
  EXPECT_EQ(s.scale, 131072.f);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(LossScale, InfHalvesTheScaleAndRestartsTheInterval) {
  const LossScaleRule r;
  LossScalerState s;
  for (int i = 0; i < 1500; ++i) update_loss_scale(s, false, r);
  update_loss_scale(s, true, r);
  EXPECT_EQ(s.scale, 32768.f);
  EXPECT_EQ(s.growth_tracker, 0);
  // 1999 clean steps after the backoff are not enough; the 2000th grows it back.
  for (int i = 0; i < 1999; ++i) update_loss_scale(s, false, r);
  EXPECT_EQ(s.scale, 32768.f);
  update_loss_scale(s, false, r);
  EXPECT_EQ(s.scale, 65536.f);
  // Repeated overflow keeps halving.
  for (int i = 0; i < 3; ++i) update_loss_scale(s, true, r);
  EXPECT_EQ(s.scale, 8192.f);
}

TEST(LossScale, NeverGrowsToInfinity) {
  LossScaleRule r;
  r.growth_interval = 1;
  LossScalerState s{FLT_MAX / 1.5f, 0};
  update_loss_scale(s, false, r);
  EXPECT_TRUE(std::isfinite(s.scale));
  EXPECT_EQ(s.scale, FLT_MAX / 1.5f) << "a growth that would overflow keeps the scale";
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(Amp, CpuBackendsRefuseMixedPrecisionByName) {
  for (const CpuKernels kernels : {CpuKernels::Reference, CpuKernels::OneDnn}) {
    auto ops = make_ops(Device::Cpu, kernels);
    EXPECT_NO_THROW(ops->set_amp(AmpMode::Off, nullptr, nullptr));
    try {
      ops->set_amp(AmpMode::Bf16, nullptr, nullptr);
      FAIL() << "--amp bf16 on the CPU was accepted";
    } catch (const UserError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--amp bf16"), std::string::npos) << m;
      EXPECT_NE(m.find("--device cuda"), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace mnist_ddp
