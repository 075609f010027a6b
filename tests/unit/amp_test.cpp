// amp_test.cpp — mixed precision on the host: the dynamic loss-scale rule of docs/DESIGN.md §5 (the
// oracle the GPU scaler is checked against in gpu_ops_test.cpp) and --amp on a CPU backend as a
// clear error. (The checkpointed scale: checkpoint_test.cpp.)
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <string>

#include "mnist_ddp/base/amp_mode.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/ops/grad_scaler.hpp"
#include "mnist_ddp/ops/ops.hpp"

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

// --amp on the CPU backends: fp16 refused by both (no fp16 training units); bf16 refused by the
// reference kernels, and by oneDNN's where the CPU (as oneDNN sees it: ONEDNN_MAX_CPU_ISA counts)
// has no bf16 units, with an error naming the CPU's instruction set; accepted there otherwise.
TEST(Amp, CpuBackendsTakeBf16WhereTheCpuHasTheUnits) {
  const auto refused = [](Ops& ops, AmpMode mode) -> std::string {
    try {
      ops.set_amp(mode, nullptr, nullptr);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  };
  for (const CpuKernels kernels : {CpuKernels::Reference, CpuKernels::OneDnn}) {
    auto ops = make_cpu_backend({.cpu_kernels = kernels});
    EXPECT_NO_THROW(ops->set_amp(AmpMode::Off, nullptr, nullptr));
    const std::string fp16 = refused(*ops, AmpMode::Fp16);
    EXPECT_NE(fp16.find("--amp fp16: the CPU has no fp16 training units"), std::string::npos)
        << fp16;
  }
  auto reference = make_cpu_backend({.cpu_kernels = CpuKernels::Reference});
  const std::string ref = refused(*reference, AmpMode::Bf16);
  EXPECT_NE(ref.find("drop --cpu-kernels reference"), std::string::npos) << ref;

  auto onednn = make_cpu_backend({.cpu_kernels = CpuKernels::OneDnn});
  const std::string bf16 = refused(*onednn, AmpMode::Bf16);
  if (dnnl_layout().bf16_units == "none") {
    EXPECT_NE(bf16.find("--amp bf16: bf16 training on the CPU needs AVX512-BF16"),
              std::string::npos)
        << bf16;
#if defined(__x86_64__)
    EXPECT_NE(bf16.find("this CPU offers AVX"), std::string::npos) << bf16;
#else
    EXPECT_NE(bf16.find("this CPU offers "), std::string::npos) << bf16;
#endif
  } else {
    EXPECT_EQ(bf16, "") << "this CPU has " << dnnl_layout().bf16_units;
    EXPECT_NO_THROW(onednn->set_amp(AmpMode::Off, nullptr, nullptr));
  }
}

}  // namespace
}  // namespace mnist_ddp
