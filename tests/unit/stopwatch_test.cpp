// stopwatch_test.cpp — the training clock counts only the intervals between start and stop.
#include "mnist_ddp/train/stopwatch.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace mnist_ddp {
namespace {

TEST(Stopwatch, CountsOnlyRunningIntervals) {
  Stopwatch w;
  EXPECT_FALSE(w.running());
  EXPECT_EQ(w.seconds(), 0.0);
  w.stop();  // stopping a stopped clock changes nothing
  EXPECT_EQ(w.seconds(), 0.0);
  w.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  w.start();  // starting a running clock does not restart the interval
  w.stop();
  const double first = w.seconds();
  EXPECT_GE(first, 0.002);
  // Stopped: time passing outside an interval is not counted.
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(w.seconds(), first);
  w.start();
  EXPECT_TRUE(w.running());
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_GE(w.seconds(), first + 0.002);  // a running interval is included
  w.stop();
  EXPECT_GE(w.seconds(), first + 0.002);
}

}  // namespace
}  // namespace mnist_ddp
