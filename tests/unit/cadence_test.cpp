// cadence_test.cpp — the run's between-step actions (train/cadence.hpp) with fake actions: each
// runs after exactly the steps that are multiples of its period, in the order listed; 0 never
// runs; a stop ends that step's list (the later actions do not run) and is returned.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "mnist_ddp/train/cadence.hpp"

namespace mnist_ddp {
namespace {

TEST(RunCadence, EachActionRunsAfterTheMultiplesOfItsPeriodInListOrder) {
  std::vector<std::pair<std::int64_t, std::string>> ran;
  RunCadence c;
  const auto fake = [&](std::string name, std::int64_t every) {
    c.add({name, every, [&ran, name](std::int64_t step) {
             ran.emplace_back(step, name);
             return 0;
           }});
  };
  fake("every step", 1);
  fake("every 3", 3);
  fake("never", 0);
  fake("every 4", 4);
  for (std::int64_t step = 1; step <= 12; ++step) EXPECT_EQ(c.after_step(step), 0);
  std::vector<std::pair<std::int64_t, std::string>> want;
  for (std::int64_t step = 1; step <= 12; ++step) {
    want.emplace_back(step, "every step");
    if (step % 3 == 0) want.emplace_back(step, "every 3");
    if (step % 4 == 0) want.emplace_back(step, "every 4");
  }
  EXPECT_EQ(ran, want);
  EXPECT_EQ(c.due(12), (std::vector<std::string>{"every step", "every 3", "every 4"}));
  EXPECT_EQ(c.due(7), (std::vector<std::string>{"every step"}));
}

TEST(RunCadence, AStopEndsThatStepsListAndIsReturned) {
  std::vector<std::string> ran;
  RunCadence c;
  c.add({"before", 1, [&](std::int64_t) {
           ran.push_back("before");
           return 0;
         }});
  c.add({"stop at 5", 1, [&](std::int64_t step) {
           ran.push_back("stop?");
           return step == 5 ? 15 : 0;  // SIGTERM's number, say
         }});
  c.add({"after", 1, [&](std::int64_t) {
           ran.push_back("after");
           return 0;
         }});
  EXPECT_EQ(c.after_step(4), 0);
  EXPECT_EQ(ran, (std::vector<std::string>{"before", "stop?", "after"}));
  ran.clear();
  EXPECT_EQ(c.after_step(5), 15);
  EXPECT_EQ(ran, (std::vector<std::string>{"before", "stop?"}));
}

TEST(RunCadence, AnActionWithoutABodyOrANegativePeriodIsRefused) {
  // An internal error (fail_internal: the message, then abort), not a user's.
  RunCadence c;
  EXPECT_DEATH(c.add({"no body", 1, nullptr}), "cadence action 'no body'");
  EXPECT_DEATH(c.add({"negative", -1, [](std::int64_t) { return 0; }}),
               "cadence action 'negative'");
}

}  // namespace
}  // namespace mnist_ddp
