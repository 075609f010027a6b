// optimizer_test.cpp — PyTorch's SGD update rule (hand-computed values) and the LR schedules.
#include <gtest/gtest.h>

#include <cmath>

#include "mnist_ddp/model/optimizer.hpp"
#include "ops/cpu/cpu_kernels.hpp"

namespace mnist_ddp {
namespace {

TEST(Sgd, PlainStep) {
  double p = 1.0, g = 0.5, buf = 0;
  SgdParams s;
  s.lr = 0.1;
  cpu::sgd_step(1, &p, &g, &buf, s, true);
  EXPECT_DOUBLE_EQ(p, 1.0 - 0.1 * 0.5);
}

TEST(Sgd, MomentumWeightDecayDampeningMatchTorch) {
  // torch.optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.2, weight_decay=0.01), p=1, g=0.5 then
  // 0.25
  SgdParams s;
  s.lr = 0.1;
  s.momentum = 0.9;
  s.dampening = 0.2;
  s.weight_decay = 0.01;
  double p = 1.0, buf = 0;
  double g = 0.5;
  cpu::sgd_step(1, &p, &g, &buf, s, true);
  // step 1: d = 0.5 + 0.01*1 = 0.51; buf = d (no dampening on the first step); p = 1 - 0.051
  EXPECT_NEAR(buf, 0.51, 1e-15);
  EXPECT_NEAR(p, 0.949, 1e-15);
  g = 0.25;
  cpu::sgd_step(1, &p, &g, &buf, s, false);
  // step 2: d = 0.25 + 0.00949 = 0.25949; buf = 0.9*0.51 + 0.8*0.25949 = 0.666592
  EXPECT_NEAR(buf, 0.666592, 1e-12);
  EXPECT_NEAR(p, 0.949 - 0.1 * 0.666592, 1e-12);
}

TEST(Sgd, Nesterov) {
  SgdParams s;
  s.lr = 0.5;
  s.momentum = 0.5;
  s.nesterov = true;
  double p = 0.0, buf = 0, g = 1.0;
  cpu::sgd_step(1, &p, &g, &buf, s, true);
  // buf = 1; d = g + m*buf = 1.5; p = -0.75
  EXPECT_DOUBLE_EQ(p, -0.75);
  cpu::sgd_step(1, &p, &g, &buf, s, false);
  // buf = 0.5*1 + 1 = 1.5; d = 1 + 0.75 = 1.75; p = -0.75 - 0.875
  EXPECT_DOUBLE_EQ(buf, 1.5);
  EXPECT_DOUBLE_EQ(p, -1.625);
}

TEST(LrSchedule, ConstantStepCosineWarmup) {
  LrConfig c;
  c.base_lr = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(c, 1000, 7), 0.1);
  c.schedule = LrSchedule::Step;
  c.step_size = 2;
  c.gamma = 0.5;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0, 1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 0, 2), 0.05);
  EXPECT_DOUBLE_EQ(learning_rate(c, 0, 5), 0.025);
  c.schedule = LrSchedule::Cosine;
  c.total_steps = 110;
  c.warmup_steps = 10;
  c.min_lr = 0.0;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0, 0), 0.01);  // warm-up: 0.1 * 1/10
  EXPECT_DOUBLE_EQ(learning_rate(c, 9, 0), 0.1);
  EXPECT_NEAR(learning_rate(c, 10, 0), 0.1, 1e-15);   // cosine starts at base
  EXPECT_NEAR(learning_rate(c, 60, 0), 0.05, 1e-15);  // halfway
  EXPECT_NEAR(learning_rate(c, 110, 0), 0.0, 1e-15);
}

}  // namespace
}  // namespace mnist_ddp
