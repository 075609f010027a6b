// dir_lock.hpp — one writer per directory: the checkpoint directory (DIR/.mnist_ddp.lock) and the
// log directory (DIR/.mnist_ddp.log.lock: the train log, metrics.jsonl and the flight recorder's
// dumps), each its own lock file, so one directory can be both. A run that writes it holds the
// lock from before training until it exits: an fcntl write lock (the operating
// system's, which NFS v3 (lockd) and v4 carry across hosts and Lustre carries when mounted with
// -o flock) plus a holder record in the file (host, pid, Slurm job) whose mtime the holder touches
// every kLockHeartbeatSeconds. A second run aimed at a held directory is refused before it touches
// anything. A holder that died never blocks a restart: its OS lock went with its process, and the
// record alone is trusted only while its heartbeat is fresh (decide_lock holds the whole rule).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace mnist_ddp {

inline constexpr const char* kLockFileName = ".mnist_ddp.lock";

// Which directory a lock guards, in the user's words: the flag that names it, its lock file, and
// why two runs must not share it (said in the refusal).
struct LockedDir {
  const char* flag;       // "--checkpoint-dir"
  const char* file_name;  // ".mnist_ddp.lock"
  const char* what;       // "a checkpoint directory"
  const char* why;        // "its --keep rotation would delete the other's checkpoints"
};
inline constexpr LockedDir kCheckpointDir{
    "--checkpoint-dir", kLockFileName, "a checkpoint directory",
    "its --keep rotation would delete the other's checkpoints"};
inline constexpr LockedDir kLogDir{
    "--log-dir", ".mnist_ddp.log.lock", "a log directory",
    "both would write mnist_train.log and metrics.jsonl, and each would remove the other's "
    "flight-recorder dumps"};
inline constexpr double kLockHeartbeatSeconds = 15;
// A record whose heartbeat is older than this belongs to a holder that is gone (8 missed beats).
inline constexpr double kLockStaleSeconds = 120;
// A holder of the same Slurm job (a requeued or restarted job whose old processes are still
// finishing) is waited for this long before the directory counts as held.
inline constexpr double kLockSameJobWaitSeconds = 60;

// Who holds (or wants) the directory. job: "JOBID" or "ARRAYJOB_TASK" under Slurm, else "".
struct LockHolder {
  std::string state;  // "held" or "released"
  std::string host;
  long pid = 0;
  std::string job;
  std::string started;           // ISO 8601 UTC
  double heartbeat_age_s = 0;    // now minus the file's mtime, when read
  std::string describe() const;  // "host node7 pid 4242 (Slurm job 1234), heartbeat 3 s ago"
};

// What the fcntl lock said.
enum class OsLock { Acquired, HeldElsewhere, Unsupported };

enum class LockAction { Take, Wait, Refuse };
struct LockDecision {
  LockAction action = LockAction::Take;
  bool os_lock = true;  // whether the taker holds the OS lock (false: the record alone)
  std::string note;     // said when taking over a holder that did not release, or why refused
};

// The rule, as a pure function (unit-tested over every branch):
// - OS lock acquired: a record that is released, or of this host (its process is gone: its lock
//   went with it), or of this Slurm job, or stale, is taken over; a fresh record of another host
//   means this file system's locks do not reach that host (NFS mounted nolock, Lustre localflock):
//   refused.
// - OS lock held by a live process: refused, except a holder of this same Slurm job (a requeued or
//   restarted job): waited for (kLockSameJobWaitSeconds), and taken over without the OS lock once
//   its heartbeat is stale (its node was lost and the server kept the lock).
// - No OS locks on this file system: the record alone, with the same host's pid checked for life.
// pid_alive: whether the record's pid runs on this host (only asked for a same-host record).
LockDecision decide_lock(OsLock os, const std::optional<LockHolder>& record, const LockHolder& me,
                         bool pid_alive);

// The holder of a directory's lock; the destructor (end of the run, or an error unwinding it)
// marks the record released and unlocks. Rank 0 only.
class DirLock {
 public:
  // Takes the lock on dir (created if needed). Throws UserError (exit 2) naming the directory, the
  // holder and the fix when it is held. `notes` receives what a user should read (a holder that
  // did not release, a file system without locks).
  static std::unique_ptr<DirLock> acquire(const std::string& dir, std::vector<std::string>* notes,
                                          const LockedDir& kind = kCheckpointDir);
  // --dry-run: the same verdict as acquire() without taking the lock or writing anything (a
  // directory or lock file that does not exist yet is free). UserError as acquire() when held;
  // `notes` as acquire(), and a holder of this Slurm job that acquire() would wait for.
  static void check(const std::string& dir, std::vector<std::string>* notes,
                    const LockedDir& kind = kCheckpointDir);
  // Who holds dir's lock, when acquire() would refuse or wait ("held by host ... pid ..."); empty
  // when a run could take it or the lock file cannot be read. Reads only (--eval-only and
  // --dry-run beside a running job).
  static std::string holder_if_held(const std::string& dir, const LockedDir& kind);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  DirLock(std::string path, int fd, const LockedDir& kind);
  void heartbeat_loop();

  std::string path_;
  int fd_ = -1;
  LockedDir kind_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread heartbeat_;
};

// Who this process is, as a lock record would say (host, pid, Slurm job, now).
LockHolder this_process_as_holder();

// The record in dir's lock file, if there is one that parses (for tools and tests).
std::optional<LockHolder> read_lock_record(const std::string& dir,
                                           const LockedDir& kind = kCheckpointDir);

}  // namespace mnist_ddp
