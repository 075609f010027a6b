// flight_recorder_test.cpp — the rings keep the last N collectives in order with their state; a
// dump is one parseable file written whole; the dump signal writes one and the process goes on.
#include "mnist_ddp/comm/flight_recorder.hpp"

#include "mnist_ddp/diagnostics/check.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

namespace mnist_ddp {
namespace {

std::string temp_dir(const char* name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   (std::string("mnist_ddp_flight_") + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

TEST(FlightRecorder, OffUntilArmedAndWhenArmedWithZero) {
  FlightRecorder off(0, 2, "h");
  EXPECT_EQ(off.open("world", 2), nullptr);
  EXPECT_EQ(off.dump("why"), "");
  FlightRecorder zero(0, 2, "h");
  zero.arm(0, temp_dir("zero"), SIGUSR2);
  EXPECT_FALSE(zero.on());
  EXPECT_EQ(zero.open("world", 2), nullptr);
  EXPECT_EQ(zero.dump("why"), "");
}

TEST(FlightRecorder, RingKeepsTheLastNInOrderWithTheirState) {
  FlightRecorder rec(1, 4, "node7");
  rec.arm(3, temp_dir("ring"), SIGUSR2);
  FlightRing* ring = rec.open("world", 4);
  ASSERT_NE(ring, nullptr);
  for (std::uint64_t s = 1; s <= 5; ++s) {
    rec.set_step(static_cast<std::int64_t>(s) * 10);
    ring->begin(s, s == 4 ? "broadcast" : "allreduce", 100 * s, DType::F32);
    if (s != 5) ring->end(s, s == 3 ? FlightState::Enqueued : FlightState::Completed);
  }
  const std::vector<FlightEntry> e = ring->snapshot();
  ASSERT_EQ(e.size(), 3u);  // the last 3 of 5
  EXPECT_EQ(e[0].seq, 3u);
  EXPECT_EQ(e[0].state, FlightState::Enqueued);
  EXPECT_EQ(e[1].seq, 4u);
  EXPECT_STREQ(e[1].op, "broadcast");
  EXPECT_EQ(e[1].count, 400u);
  EXPECT_EQ(e[1].step, 40);
  EXPECT_EQ(e[1].state, FlightState::Completed);
  EXPECT_GE(e[1].ended_s, e[1].started_s);
  EXPECT_EQ(e[2].seq, 5u);
  EXPECT_EQ(e[2].state, FlightState::Started);  // never ended: still in flight
  EXPECT_EQ(e[2].ended_s, -1);
  // An end for an entry already overwritten changes nothing.
  ring->end(1, FlightState::Completed);
  EXPECT_EQ(ring->snapshot().size(), 3u);
  // A failed capture's collectives are forgotten.
  ring->forget_after(3);
  const std::vector<FlightEntry> kept = ring->snapshot();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].seq, 3u);
}

TEST(FlightRecorder, DumpIsOneParseableFileWithEveryRing) {
  const std::string dir = temp_dir("dump");
  FlightRecorder rec(3, 4, "node9");
  rec.arm(8, dir, SIGUSR2);
  FlightRing* world = rec.open("world", 4);
  FlightRing* local = rec.open("node-local", 2);
  rec.set_step(7);
  world->begin(1, "allreduce", 29034, DType::F32);
  world->end(1, FlightState::Completed);
  world->begin(2, "allgather", 5, DType::U64);
  local->begin(1, "allreduce", 10, DType::BF16);
  const std::string path = rec.dump("a test");
  EXPECT_EQ(path, dir + "/flight-rank3.json");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const nlohmann::json j = read_json(path);
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["world"], 4);
  EXPECT_EQ(j["host"], "node9");
  EXPECT_EQ(j["reason"], "a test");
  EXPECT_EQ(j["step"], 7);
  ASSERT_EQ(j["communicators"].size(), 2u);
  const auto& w = j["communicators"][0];
  EXPECT_EQ(w["name"], "world");
  EXPECT_EQ(w["size"], 4);
  ASSERT_EQ(w["entries"].size(), 2u);
  EXPECT_EQ(w["entries"][0]["op"], "allreduce");
  EXPECT_EQ(w["entries"][0]["bytes"], 29034u * 4);
  EXPECT_EQ(w["entries"][0]["state"], "completed");
  EXPECT_EQ(w["entries"][1]["dtype"], "u64");
  EXPECT_EQ(w["entries"][1]["state"], "started");
  EXPECT_EQ(j["communicators"][1]["entries"][0]["bytes"], 20u);  // 10 x bf16
  std::filesystem::remove_all(dir);
}

TEST(FlightRecorder, DumpSignalWritesADumpAndTheProcessGoesOn) {
  const std::string dir = temp_dir("signal");
  {
    FlightRecorder rec(0, 1, "h");
    rec.arm(4, dir, SIGUSR2);
    FlightRing* ring = rec.open("world", 1);
    ring->begin(1, "allreduce", 1, DType::I32);
    ASSERT_EQ(raise(SIGUSR2), 0);
    // The dump thread writes it; wait for the file (bounded: a missing dump fails, not hangs).
    const std::string path = dir + "/flight-rank0.json";
    for (int i = 0; i < 500 && !std::filesystem::exists(path); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(std::filesystem::exists(path));
    EXPECT_EQ(read_json(path)["reason"], "SIGUSR2 received");
  }
  // The recorder is gone and its handler writes nowhere: the signal is harmless now.
  signal(SIGUSR2, SIG_IGN);
  std::filesystem::remove_all(dir);
}

// An earlier run's dump of this rank goes only once the run holds its directories
// (clear_earlier_dump, after the locks: arming alone removes nothing, so a run refused at a lock
// leaves the evidence), and never once this run has dumped.
TEST(FlightRecorder, AnEarlierRunsDumpGoesOnlyWhenTheRunHoldsItsDirectory) {
  const std::string dir = temp_dir("stale");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/flight-rank2.json") << "{}";
  std::ofstream(dir + "/flight-rank2.json.tmp") << "{";
  std::ofstream(dir + "/flight-rank3.json") << "{}";  // another rank's: its own recorder's
  {
    FlightRecorder rec(2, 4, "h");
    rec.arm(4, dir, SIGUSR2);
    EXPECT_TRUE(std::filesystem::exists(dir + "/flight-rank2.json"));
    rec.clear_earlier_dump();
    EXPECT_FALSE(std::filesystem::exists(dir + "/flight-rank2.json"));
    EXPECT_FALSE(std::filesystem::exists(dir + "/flight-rank2.json.tmp"));
    EXPECT_TRUE(std::filesystem::exists(dir + "/flight-rank3.json"));
  }
  {
    FlightRecorder rec(3, 4, "h");
    rec.arm(4, dir, SIGUSR2);
    ASSERT_FALSE(rec.dump("this run's own").empty());
    rec.clear_earlier_dump();  // this run's dump stays
    EXPECT_TRUE(std::filesystem::exists(dir + "/flight-rank3.json"));
  }
  std::filesystem::remove_all(dir);
}

TEST(FlightRecorder, TheDumpSignalNeverKillsARankWithTheRecorderOff) {
  FlightRecorder rec(0, 1, "h");
  rec.arm(0, temp_dir("off_signal"), SIGUSR2);
  ASSERT_EQ(raise(SIGUSR2), 0);  // default action would end the process; the handler ignores it
  EXPECT_FALSE(rec.on());
}

TEST(FlightRecorderDeathTest, AFatalInternalErrorDumpsBeforeTheJobEnds) {
  const std::string dir = temp_dir("fatal");
  // Armed here, so the forked child only dumps (a child of a threaded process must not start
  // threads: ThreadSanitizer forbids it).
  FlightRecorder rec(0, 1, "h");
  rec.arm(4, dir, SIGUSR2);
  rec.open("world", 1)->begin(1, "allreduce", 3, DType::F32);
  EXPECT_EXIT(fail_internal("a broken invariant", __FILE__, __LINE__), testing::ExitedWithCode(1),
              "internal error");
  const nlohmann::json j = read_json(dir + "/flight-rank0.json");
  EXPECT_EQ(j["reason"], "internal error: a broken invariant");
  EXPECT_EQ(j["communicators"][0]["entries"][0]["state"], "started");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mnist_ddp
