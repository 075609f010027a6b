// step_phases_test.cpp — a step's time split into its phases, and the epoch's per-phase median.
#include "mnist_ddp/train/step_phases.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace mnist_ddp {
namespace {

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

TEST(StepPhases, EachPhaseGetsTheTimeSinceThePreviousMarkAndTheMedianIsPerPhase) {
  StepPhases p;
  EXPECT_EQ(p.take_medians(), PhaseSeconds{});  // no steps: zeros
  // Three steps whose forward sleeps 1, 9 and 4 ms: the median is the 4 ms step's, at least 4 ms
  // (load only lengthens a sleep, so lower bounds are all a test can hold).
  for (const int fwd : {1, 9, 4}) {
    p.begin();
    sleep_ms(2);
    p.mark(Phase::Data);
    sleep_ms(fwd);
    p.mark(Phase::Forward);
    p.mark(Phase::Backward);
    // Comm not marked this step: it counts 0; the optimizer gets the time since Backward.
    sleep_ms(1);
    p.mark(Phase::Optimizer);
    p.end();
  }
  EXPECT_EQ(p.steps(), 3u);
  const PhaseSeconds m = p.take_medians();
  EXPECT_GE(m[static_cast<std::size_t>(Phase::Data)], 0.002);
  EXPECT_GE(m[static_cast<std::size_t>(Phase::Forward)], 0.004);
  EXPECT_EQ(m[static_cast<std::size_t>(Phase::Comm)], 0.0);
  EXPECT_GE(m[static_cast<std::size_t>(Phase::Optimizer)], 0.001);
  EXPECT_LT(m[static_cast<std::size_t>(Phase::Backward)],
            m[static_cast<std::size_t>(Phase::Forward)]);
  // Taken: the next epoch starts empty.
  EXPECT_EQ(p.steps(), 0u);
  EXPECT_EQ(p.take_medians(), PhaseSeconds{});
}

TEST(StepPhases, EvenStepCountTakesTheMeanOfTheMiddleTwo) {
  StepPhases p;
  for (const int ms : {2, 6}) {
    p.begin();
    sleep_ms(ms);
    p.mark(Phase::Data);
    p.end();
  }
  const double data = p.take_medians()[static_cast<std::size_t>(Phase::Data)];
  EXPECT_GE(data, 0.004);  // (>= 2 ms + >= 6 ms) / 2
}

TEST(StepPhases, AGpuStepsSpansMapOntoThePhases) {
  auto span = [](const char* name, double dur_us, Track track = Track::Compute) {
    TraceEvent e;
    e.name = name;
    e.track = track;
    e.dur_us = dur_us;
    return e;
  };
  const std::vector<TraceEvent> spans = {span("step", 9000),
                                         span("data", 100),
                                         span("forward layer1", 200),
                                         span("forward layer2", 300),
                                         span("forward fc", 50),
                                         span("loss", 25),
                                         span("backward fc", 60),
                                         span("backward layer2", 700),
                                         span("backward layer1", 400),
                                         span("allreduce bucket 0", 5000, Track::Comm),
                                         span("wait for gradients", 80),
                                         span("optimizer", 30)};
  const PhaseSeconds p = phase_seconds_of(spans);
  EXPECT_NEAR(p[static_cast<std::size_t>(Phase::Data)], 100e-6, 1e-12);
  EXPECT_NEAR(p[static_cast<std::size_t>(Phase::Forward)], 575e-6, 1e-12);
  EXPECT_NEAR(p[static_cast<std::size_t>(Phase::Backward)], 1160e-6, 1e-12);
  EXPECT_NEAR(p[static_cast<std::size_t>(Phase::Comm)], 80e-6, 1e-12);
  EXPECT_NEAR(p[static_cast<std::size_t>(Phase::Optimizer)], 30e-6, 1e-12);
  // Such steps join the medians like host-timed ones.
  StepPhases ph;
  ph.add(p);
  ph.add(PhaseSeconds{});
  ph.add(p);
  EXPECT_EQ(ph.steps(), 3u);
  EXPECT_NEAR(ph.take_medians()[static_cast<std::size_t>(Phase::Backward)], 1160e-6, 1e-12);
}

}  // namespace
}  // namespace mnist_ddp
