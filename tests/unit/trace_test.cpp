// trace_test.cpp — the timeline's recording: the --trace-steps window, which steps are kept,
// spans and their arguments, graph templates replayed with fresh stamps, a failed capture's
// spans forgotten, host spans and instants, and the Chrome trace-event JSON of one rank.
#include "mnist_ddp/trace/trace.hpp"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mnist_ddp/trace/trace_file.hpp"

namespace mnist_ddp {
namespace {

// A clock the test drives: a stamp reads `now`; times_us reads each stamp's time plus `replay`
// (what a graph replay does to its recorded events: the same ids, later times).
class ScriptedClock final : public StampClock {
 public:
  double now = 0;
  double replay = 0;
  int resets = 0;
  int stamp() override {
    at_.push_back(now);
    return static_cast<int>(at_.size()) - 1;
  }
  std::vector<double> times_us(const std::vector<int>& ids) override {
    std::vector<double> out;
    for (const int id : ids) out.push_back(at_.at(static_cast<std::size_t>(id)) + replay);
    return out;
  }
  void reset() override { ++resets; }
  double now_us() const override { return now; }
  double origin_unix_us() const override { return 0; }

 private:
  std::vector<double> at_;
};

TEST(TraceWindow, ParsesAColonBAndRefusesTheRest) {
  const auto w = parse_trace_window("100:150");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->first, 100);
  EXPECT_EQ(w->last, 150);
  EXPECT_TRUE(w->contains(100));
  EXPECT_TRUE(w->contains(149));
  EXPECT_FALSE(w->contains(150));
  EXPECT_FALSE(w->contains(99));
  for (const char* bad :
       {"", "5", "5:", ":5", "5:5", "6:5", "-1:5", "a:b", "1:2:3", "1.5:3", " 1:3"})
    EXPECT_FALSE(parse_trace_window(bad)) << bad;
}

TEST(TraceWindow, DefaultIsFiftyStepsAfterTenOfWarmUpClippedToTheRun) {
  EXPECT_EQ(default_trace_window(0, 1200).first, 10);
  EXPECT_EQ(default_trace_window(0, 1200).last, 60);
  // A resumed run warms up again from where it starts.
  EXPECT_EQ(default_trace_window(500, 1200).first, 510);
  EXPECT_EQ(default_trace_window(500, 1200).last, 560);
  // A short run: what it has, skipping as much warm-up as it can and never nothing.
  EXPECT_EQ(default_trace_window(0, 40).first, 0);
  EXPECT_EQ(default_trace_window(0, 40).last, 40);
  EXPECT_EQ(default_trace_window(0, 55).first, 5);
  EXPECT_EQ(default_trace_window(0, 55).last, 55);
}

TEST(Tracer, KeepsTheStepsOfTheWindowOnlyWithTheirSpansAndArguments) {
  ScriptedClock clock;
  Tracer t(clock, true, TraceWindow{2, 4});
  for (std::int64_t step = 0; step < 6; ++step) {
    t.begin_step(step, false);
    clock.now = 1000.0 * static_cast<double>(step);
    {
      const TraceScope s(&t, "step", Track::Compute, SpanArgs{.batch = 100});
      clock.now += 10;
      const int b =
          t.open("allreduce bucket 1", Track::Comm, SpanArgs{.bucket = 1, .hook = "fp16"});
      t.set_bytes(b, 25792);
      clock.now += 5;
      t.close(b, Track::Comm);
      clock.now += 1;
    }
    t.end_step(Tracer::Ran::Eager, 100);
  }
  EXPECT_EQ(clock.resets, 2);        // only the recorded steps' stamps are read and released
  ASSERT_EQ(t.events().size(), 4u);  // steps 2 and 3, two spans each
  const TraceEvent& step2 = t.events()[0];
  EXPECT_EQ(step2.name, "step");
  EXPECT_EQ(step2.track, Track::Compute);
  EXPECT_DOUBLE_EQ(step2.ts_us, 2000);
  EXPECT_DOUBLE_EQ(step2.dur_us, 16);
  EXPECT_EQ(step2.args.step, 2);
  EXPECT_EQ(step2.args.batch, 100);
  const TraceEvent& bucket3 = t.events()[3];
  EXPECT_EQ(bucket3.name, "allreduce bucket 1");
  EXPECT_EQ(bucket3.track, Track::Comm);
  EXPECT_DOUBLE_EQ(bucket3.ts_us, 3010);
  EXPECT_DOUBLE_EQ(bucket3.dur_us, 5);
  EXPECT_EQ(bucket3.args.step, 3);
  EXPECT_EQ(bucket3.args.bucket, 1);
  EXPECT_EQ(bucket3.args.bytes, 25792);
  EXPECT_EQ(bucket3.hook, "fp16");
}

TEST(Tracer, OffRecordsNothingAtAll) {
  ScriptedClock clock;
  Tracer t(clock, false, TraceWindow{0, 100});
  t.begin_step(0, true);
  { const TraceScope s(&t, "step", Track::Compute); }
  t.end_step(Tracer::Ran::Captured, 100);
  { const HostTraceScope e(&t, "evaluate"); }
  t.instant("stop on SIGTERM");
  EXPECT_TRUE(t.events().empty());
  EXPECT_EQ(clock.resets, 0);
}

TEST(Tracer, AGraphCapturedBeforeTheWindowIsReplayedInItWithItsOwnStampsReadAgain) {
  ScriptedClock clock;
  Tracer t(clock, true, TraceWindow{5, 7});
  // Step 1 (batch 100) is captured, outside the window: its spans become the template.
  t.begin_step(1, true);
  clock.now = 100;
  {
    const TraceScope s(&t, "forward layer1", Track::Compute, SpanArgs{.layer = "layer1"});
    clock.now = 130;
  }
  t.end_step(Tracer::Ran::Captured, 100);
  EXPECT_TRUE(t.events().empty());
  // Step 5 is a replay: no host code ran, the template's stamps are read (the events recorded
  // again by the replay: here 5000 us later).
  t.begin_step(5, true);
  clock.replay = 5000;
  t.end_step(Tracer::Ran::Replayed, 100);
  ASSERT_EQ(t.events().size(), 1u);
  EXPECT_EQ(t.events()[0].name, "forward layer1");
  EXPECT_DOUBLE_EQ(t.events()[0].ts_us, 5100);
  EXPECT_DOUBLE_EQ(t.events()[0].dur_us, 30);
  EXPECT_EQ(t.events()[0].args.step, 5);  // the replayed step's number, not the capture's
  EXPECT_STREQ(t.events()[0].args.layer, "layer1");
  // A replay of a batch size never captured leaves nothing (and no stale template).
  t.begin_step(6, true);
  t.end_step(Tracer::Ran::Replayed, 64);
  EXPECT_EQ(t.events().size(), 1u);
}

TEST(Tracer, AFailedCapturesSpansAreForgottenAndTheEagerRerunsKept) {
  ScriptedClock clock;
  Tracer t(clock, true, TraceWindow{0, 10});
  t.begin_step(3, true);
  const std::size_t mark = t.mark();
  { const TraceScope s(&t, "data", Track::Compute); }  // the capture that failed
  t.rewind(mark);
  { const TraceScope s(&t, "step", Track::Compute); }  // the eager rerun
  t.end_step(Tracer::Ran::Eager, 100);
  ASSERT_EQ(t.events().size(), 1u);
  EXPECT_EQ(t.events()[0].name, "step");
}

TEST(Tracer, HostSpansAndInstantsAreKeptOutsideTheWindow) {
  ScriptedClock clock;
  Tracer t(clock, true, TraceWindow{0, 1});
  clock.now = 7000;
  {
    const HostTraceScope e(&t, "checkpoint", SpanArgs{.step = 600});
    clock.now = 7250;
  }
  t.instant("requeue on USR1", SpanArgs{.step = 600});
  ASSERT_EQ(t.events().size(), 2u);
  EXPECT_EQ(t.events()[0].name, "checkpoint");
  EXPECT_DOUBLE_EQ(t.events()[0].dur_us, 250);
  EXPECT_EQ(t.events()[0].args.step, 600);
  EXPECT_LT(t.events()[1].dur_us, 0);  // an instant
}

// Steps 0..11 of batch 100, sampled every 5th: with graphs (eager before capture_at, captured
// there, replayed after) or without. Returns the steps that gave a sample; checks each sample's
// one span.
std::vector<std::int64_t> sampled_steps(Tracer& t, ScriptedClock& clock, bool graphs,
                                        std::int64_t capture_at = 1) {
  t.sample_every(5);
  std::vector<std::int64_t> sampled;
  for (std::int64_t step = 0; step < 12; ++step) {
    t.begin_step(step, graphs && step == capture_at);
    const auto ran = !graphs || step < capture_at ? Tracer::Ran::Eager
                     : step == capture_at         ? Tracer::Ran::Captured
                                                  : Tracer::Ran::Replayed;
    if (ran != Tracer::Ran::Replayed) {
      clock.now = 10;
      const TraceScope s(&t, "optimizer", Track::Compute);
      clock.now = 12.5;
    }
    clock.replay = 1000.0 * static_cast<double>(step);
    t.end_step(ran, 100);
    if (std::vector<TraceEvent> spans; t.take_sample(spans)) {
      EXPECT_EQ(spans.size(), 1u) << step;
      if (spans.size() != 1) continue;
      EXPECT_EQ(spans[0].name, "optimizer");
      EXPECT_DOUBLE_EQ(spans[0].dur_us, 2.5);
      EXPECT_EQ(spans[0].args.step, step);
      sampled.push_back(step);
    }
  }
  std::vector<TraceEvent> none;
  EXPECT_FALSE(t.take_sample(none));  // a sample is taken once
  return sampled;
}

TEST(Tracer, SamplingTimesEveryNthEagerStepAfterStepZero) {
  ScriptedClock clock;
  Tracer t(clock, false, TraceWindow{});  // no --trace: only the breakdown's samples
  EXPECT_EQ(sampled_steps(t, clock, false), (std::vector<std::int64_t>{5, 10}));
  EXPECT_TRUE(t.events().empty());  // nothing for a trace file
}

TEST(Tracer, SampledGraphReplaysAreTimedOnlyWhenTheTraceStampedTheGraph) {
  {
    ScriptedClock clock;
    Tracer t(clock, false, TraceWindow{});
    EXPECT_TRUE(sampled_steps(t, clock, true).empty());
    // The captured step recorded no stamps: the graph has no event nodes to pay for.
    EXPECT_EQ(clock.stamp(), 0);
  }
  {
    // Not even when the capture falls on a sampled step: that step goes unsampled.
    ScriptedClock clock;
    Tracer t(clock, false, TraceWindow{});
    EXPECT_TRUE(sampled_steps(t, clock, true, 5).empty());
    EXPECT_EQ(clock.stamp(), 0);
  }
  ScriptedClock clock;
  Tracer t(clock, true, TraceWindow{1000, 1001});  // --trace, its window after this run
  EXPECT_EQ(sampled_steps(t, clock, true), (std::vector<std::int64_t>{5, 10}));
  EXPECT_TRUE(t.events().empty());
}

TEST(TraceOutput, OneRanksEventsAreChromeTraceEventsOnNamedTracksOneLanePerBucket) {
  std::vector<TraceEvent> ev(4);
  ev[0].name = "backward fc";
  ev[0].ts_us = 12.5;
  ev[0].dur_us = 3;
  ev[0].args.step = 7;
  ev[0].args.layer = "fc";
  ev[1].name = "allreduce bucket 1";
  ev[1].track = Track::Comm;
  ev[1].ts_us = 13;
  ev[1].dur_us = 4;
  ev[1].args.bucket = 1;
  ev[1].args.bytes = 51584;
  ev[1].hook = "none";
  ev[2].name = "allreduce all gradients";
  ev[2].track = Track::Comm;
  ev[2].ts_us = 20;
  ev[2].dur_us = 1;
  ev[3].name = "stop on SIGTERM";
  ev[3].ts_us = 99;
  ev[3].dur_us = -1;
  const auto j = nlohmann::json::parse(trace_events_json(ev, 3, "node7", 1000));
  ASSERT_TRUE(j.is_array());
  std::map<int, std::string> threads;
  for (const auto& e : j) {
    EXPECT_EQ(e["pid"], 3);
    if (e["ph"] == "M" && e["name"] == "process_name") {
      EXPECT_EQ(e["args"]["name"], "rank 3 (node7)");
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      threads[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
    }
  }
  // Compute, and the lanes used: bucket 1's (tid 2) and the whole reduction's (tid 1 + 3).
  EXPECT_EQ(threads, (std::map<int, std::string>{{0, "compute"},
                                                 {2, "communication: bucket 1"},
                                                 {4, "communication: all gradients"}}));
  const auto& span = j[j.size() - 4];
  EXPECT_EQ(span["ph"], "X");
  EXPECT_EQ(span["tid"], 0);
  EXPECT_EQ(span["ts"], 1012.5);  // shifted onto the job's timeline
  EXPECT_EQ(span["dur"], 3);
  EXPECT_EQ(span["args"], (nlohmann::json{{"step", 7}, {"layer", "fc"}}));
  const auto& bucket = j[j.size() - 3];
  EXPECT_EQ(bucket["tid"], 2);
  EXPECT_EQ(bucket["cat"], "communication");
  EXPECT_EQ(bucket["args"], (nlohmann::json{{"bucket", 1}, {"bytes", 51584}, {"hook", "none"}}));
  EXPECT_EQ(j[j.size() - 2]["tid"], 4);
  const auto& instant = j.back();
  EXPECT_EQ(instant["ph"], "i");
  EXPECT_EQ(instant["s"], "p");
  EXPECT_FALSE(instant.contains("dur"));
}

TEST(Tracer, AScopeLeftByAnExceptionStampsNothingAndASpanWithoutAnEndIsDropped) {
  ScriptedClock clock;
  Tracer t(clock, true, TraceWindow{0, 10});
  t.begin_step(0, false);
  try {
    const TraceScope s(&t, "forward layer2", Track::Compute);
    throw std::runtime_error("a failed call");
  } catch (const std::runtime_error&) {
  }
  { const TraceScope s(&t, "optimizer", Track::Compute); }
  t.end_step(Tracer::Ran::Eager, 100);
  ASSERT_EQ(t.events().size(), 1u);  // the unwound span had no end: not written
  EXPECT_EQ(t.events()[0].name, "optimizer");
}

}  // namespace
}  // namespace mnist_ddp
