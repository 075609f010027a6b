// dir_lock_test.cpp — one writer per checkpoint directory: the lock rule (decide_lock) over every
// branch, and DirLock itself: a second holder refused with the holder named, a released
// directory taken without a word, a dead holder's record taken over, a fresh record of another
// host refused, a stale one taken over.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "mnist_ddp/checkpoint/dir_lock.hpp"
#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

namespace fs = std::filesystem;

// fn throws a UserError whose message holds every one of `parts`.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

LockHolder holder(const std::string& host, const std::string& job, double age_s,
                  const std::string& state = "held") {
  LockHolder h;
  h.state = state;
  h.host = host;
  h.pid = 4242;
  h.job = job;
  h.heartbeat_age_s = age_s;
  return h;
}

TEST(LockRule, OsLockAcquiredTakesWhatIsGoneAndRefusesAFreshRecordOfAnotherHost) {
  const LockHolder me = holder("node1", "77", 0);
  // Nothing there, or released: taken without a word.
  EXPECT_EQ(decide_lock(OsLock::Acquired, std::nullopt, me, false).action, LockAction::Take);
  auto d = decide_lock(OsLock::Acquired, holder("node2", "", 1, "released"), me, false);
  EXPECT_EQ(d.action, LockAction::Take);
  EXPECT_TRUE(d.note.empty());
  // This host's holder is gone (its OS lock went with it): taken over, said.
  d = decide_lock(OsLock::Acquired, holder("node1", "", 3), me, false);
  EXPECT_EQ(d.action, LockAction::Take);
  EXPECT_NE(d.note.find("ended without releasing"), std::string::npos) << d.note;
  // Another host, fresh heartbeat: the file system's locks do not reach it: refused.
  d = decide_lock(OsLock::Acquired, holder("node2", "12", 3), me, false);
  EXPECT_EQ(d.action, LockAction::Refuse);
  EXPECT_NE(d.note.find("host node2 pid 4242 (Slurm job 12)"), std::string::npos) << d.note;
  // ... unless it is this very Slurm job (requeued onto another node), or stale.
  EXPECT_EQ(decide_lock(OsLock::Acquired, holder("node2", "77", 3), me, false).action,
            LockAction::Take);
  EXPECT_EQ(
      decide_lock(OsLock::Acquired, holder("node2", "12", kLockStaleSeconds + 1), me, false).action,
      LockAction::Take);
}

TEST(LockRule, OsLockHeldRefusesOtherJobsAndWaitsForItsOwnJob) {
  const LockHolder me = holder("node1", "77", 0);
  auto d = decide_lock(OsLock::HeldElsewhere, holder("node1", "", 2), me, true);
  EXPECT_EQ(d.action, LockAction::Refuse);
  EXPECT_NE(d.note.find("held by host node1 pid 4242"), std::string::npos) << d.note;
  // A held OS lock with a stale record of another job is still a live process: refused.
  EXPECT_EQ(decide_lock(OsLock::HeldElsewhere, holder("node2", "12", 1000), me, false).action,
            LockAction::Refuse);
  // The same job (requeued while its old processes finish): waited for.
  EXPECT_EQ(decide_lock(OsLock::HeldElsewhere, holder("node1", "77", 2), me, true).action,
            LockAction::Wait);
  // The same job on a node that stopped beating (node lost, the server kept its lock): taken
  // over on the record alone.
  d = decide_lock(OsLock::HeldElsewhere, holder("node2", "77", kLockStaleSeconds + 1), me, false);
  EXPECT_EQ(d.action, LockAction::Take);
  EXPECT_FALSE(d.os_lock);
  // No job id outside Slurm: never "the same job".
  EXPECT_EQ(decide_lock(OsLock::HeldElsewhere, holder("node1", "", 2), holder("node1", "", 0), true)
                .action,
            LockAction::Refuse);
}

TEST(LockRule, WithoutOsLocksTheRecordDecides) {
  const LockHolder me = holder("node1", "", 0);
  EXPECT_EQ(decide_lock(OsLock::Unsupported, std::nullopt, me, false).action, LockAction::Take);
  // This host: the pid decides.
  EXPECT_EQ(decide_lock(OsLock::Unsupported, holder("node1", "", 5), me, true).action,
            LockAction::Refuse);
  EXPECT_EQ(decide_lock(OsLock::Unsupported, holder("node1", "", 5), me, false).action,
            LockAction::Take);
  // Another host: the heartbeat decides.
  EXPECT_EQ(decide_lock(OsLock::Unsupported, holder("node2", "", 5), me, false).action,
            LockAction::Refuse);
  const auto d =
      decide_lock(OsLock::Unsupported, holder("node2", "", kLockStaleSeconds + 5), me, false);
  EXPECT_EQ(d.action, LockAction::Take);
  EXPECT_FALSE(d.os_lock);
}

class DirLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnist_ddp_lock_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A holder record as another process (or host) would have left it, its heartbeat age_s old.
  void plant(const std::string& host, long pid, double age_s) {
    fs::create_directories(dir_);
    const fs::path f = dir_ / kLockFileName;
    std::ofstream(f) << R"({"holder":"mnist_ddp","state":"held","host":")" << host << R"(","pid":)"
                     << pid << R"(,"job":"","started":"2026-01-01T00:00:00Z"})";
    const std::time_t t = std::time(nullptr) - static_cast<std::time_t>(age_s);
    struct timespec times[2] = {{t, 0}, {t, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, f.c_str(), times, 0), 0);
  }
  fs::path dir_;
};

TEST_F(DirLockTest, SecondHolderIsRefusedNamingTheFirstAndTheFix) {
  std::vector<std::string> notes;
  auto first = DirLock::acquire(dir_.string(), &notes);
  EXPECT_TRUE(notes.empty());
  const auto rec = read_lock_record(dir_.string());
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->state, "held");
  EXPECT_EQ(rec->pid, static_cast<long>(getpid()));
  expect_error([&] { DirLock::acquire(dir_.string(), &notes); },
               {dir_.string() + " is in use", "pid " + std::to_string(getpid()),
                "pass another --checkpoint-dir"});
  first.reset();  // released: the next run takes it without a word
  EXPECT_EQ(read_lock_record(dir_.string())->state, "released");
  auto second = DirLock::acquire(dir_.string(), &notes);
  EXPECT_TRUE(notes.empty());
  EXPECT_EQ(read_lock_record(dir_.string())->state, "held");
}

TEST_F(DirLockTest, DeadHolderOfThisHostIsTakenOverAtOnce) {
  const LockHolder me = this_process_as_holder();
  plant(me.host, 999999999, 1);  // no such pid: its lock went with it
  std::vector<std::string> notes;
  auto lock = DirLock::acquire(dir_.string(), &notes);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("ended without releasing"), std::string::npos) << notes[0];
  EXPECT_EQ(read_lock_record(dir_.string())->pid, static_cast<long>(getpid()));
}

TEST_F(DirLockTest, FreshRecordOfAnotherHostIsRefusedAndAStaleOneTakenOver) {
  plant("node-elsewhere", 31337, 5);
  std::vector<std::string> notes;
  expect_error(
      [&] { DirLock::acquire(dir_.string(), &notes); },
      {"host node-elsewhere pid 31337", "heartbeat 5 s ago", "counts as gone after 120 s"});
  plant("node-elsewhere", 31337, kLockStaleSeconds + 60);
  auto lock = DirLock::acquire(dir_.string(), &notes);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("node-elsewhere"), std::string::npos) << notes[0];
}

// --dry-run's check: the verdict acquire() would reach, with nothing created or written.
TEST_F(DirLockTest, DryRunCheckGivesAcquiresVerdictAndWritesNothing) {
  std::vector<std::string> notes;
  const fs::path fresh = dir_ / "not-yet";
  DirLock::check(fresh.string(), &notes);  // no directory yet: free
  EXPECT_FALSE(fs::exists(fresh));
  DirLock::check(dir_.string(), &notes);  // a directory no run has held: free
  EXPECT_FALSE(fs::exists(dir_ / kLockFileName));
  EXPECT_TRUE(notes.empty());
  auto held = DirLock::acquire(dir_.string(), &notes);
  const auto before = fs::last_write_time(dir_ / kLockFileName);
  const auto record = read_lock_record(dir_.string());
  expect_error([&] { DirLock::check(dir_.string(), &notes); },
               {dir_.string() + " is in use", "pid " + std::to_string(getpid())});
  EXPECT_EQ(fs::last_write_time(dir_ / kLockFileName), before);
  EXPECT_EQ(read_lock_record(dir_.string())->started, record->started);
  held.reset();
  DirLock::check(dir_.string(), &notes);  // released: free again
  EXPECT_EQ(read_lock_record(dir_.string())->state, "released");
  plant("node-elsewhere", 31337, 5);  // a fresh holder the OS lock does not show
  expect_error([&] { DirLock::check(dir_.string(), &notes); }, {"host node-elsewhere pid 31337"});
  EXPECT_TRUE(notes.empty());
}

}  // namespace
}  // namespace mnist_ddp
