// dir_lock.cpp — a directory's lock (the checkpoint and the log directory): fcntl write lock +
// holder record + heartbeat (dir_lock.hpp).
#include "mnist_ddp/checkpoint/dir_lock.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::string iso_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// A write lock over the whole file. Open-file-description locks first (a second open of the file
// in this process conflicts too, and closing some other descriptor of it cannot drop the lock);
// classic POSIX locks where the kernel has none (EINVAL).
// The fcntl write lock on the whole file: taken (take), or only asked about (--dry-run: a run
// starting at that moment must not find it held). Acquired: taken, or free.
OsLock os_lock(int fd, bool take, int* err) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  int rc = -1;
#ifdef F_OFD_SETLK
  rc = ::fcntl(fd, take ? F_OFD_SETLK : F_OFD_GETLK, &fl);
  if (rc != 0 && errno == EINVAL) rc = ::fcntl(fd, take ? F_SETLK : F_GETLK, &fl);
#else
  rc = ::fcntl(fd, take ? F_SETLK : F_GETLK, &fl);
#endif
  *err = rc == 0 ? 0 : errno;
  if (!take && rc == 0) return fl.l_type == F_UNLCK ? OsLock::Acquired : OsLock::HeldElsewhere;
  if (rc == 0) return OsLock::Acquired;
  if (take && (errno == EAGAIN || errno == EACCES)) return OsLock::HeldElsewhere;
  return OsLock::Unsupported;  // ENOLCK (NFS without lockd), ENOSYS/EOPNOTSUPP (Lustre noflock)
}

std::optional<LockHolder> parse_record(const std::string& text, double age_s) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("state") || !j["state"].is_string())
    return std::nullopt;
  LockHolder h;
  h.state = j["state"].get<std::string>();
  h.host = j.value("host", "");
  h.pid = j.value("pid", 0L);
  h.job = j.value("job", "");
  h.started = j.value("started", "");
  h.heartbeat_age_s = age_s;
  return h;
}

std::optional<LockHolder> read_record_fd(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size > 64 * 1024) return std::nullopt;
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  if (::pread(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    return std::nullopt;
  const double age = static_cast<double>(std::time(nullptr) - st.st_mtime);
  return parse_record(text, age);
}

void write_record(int fd, const LockHolder& h, const std::string& path, const LockedDir& kind) {
  const std::string text = nlohmann::json{{"holder", "mnist_ddp"},
                                          {"state", h.state},
                                          {"host", h.host},
                                          {"pid", h.pid},
                                          {"job", h.job},
                                          {"started", h.started},
                                          {"heartbeat_s", kLockHeartbeatSeconds}}
                               .dump() +
                           "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
      ::fsync(fd) != 0) {
    throw UserError(fmt::format("{}: cannot write the lock record: {}; pass a writable {}", path,
                                std::strerror(errno), kind.flag));
  }
}

bool pid_alive(long pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace

std::string LockHolder::describe() const {
  return fmt::format("host {} pid {}{}, started {}, heartbeat {:.0f} s ago", host, pid,
                     job.empty() ? "" : fmt::format(" (Slurm job {})", job),
                     started.empty() ? "?" : started, heartbeat_age_s);
}

LockHolder this_process_as_holder() {
  LockHolder me;
  me.state = "held";
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  me.host = host;
  me.pid = static_cast<long>(::getpid());
  // An array task is its own job for this purpose: ARRAYJOB_TASK, as Slurm names it in squeue.
  const std::string array_job = env("SLURM_ARRAY_JOB_ID"), task = env("SLURM_ARRAY_TASK_ID");
  me.job = !array_job.empty() && !task.empty() ? array_job + "_" + task : env("SLURM_JOB_ID");
  me.started = iso_now();
  return me;
}

LockDecision decide_lock(OsLock os, const std::optional<LockHolder>& record, const LockHolder& me,
                         bool alive) {
  const bool held = record && record->state == "held";
  const bool same_host = held && record->host == me.host;
  const bool same_job = held && !me.job.empty() && record->job == me.job;
  const bool stale = held && record->heartbeat_age_s > kLockStaleSeconds;
  const std::string who = held ? record->describe() : "";
  switch (os) {
    case OsLock::Acquired:
      if (!held) return {LockAction::Take, true, ""};
      if (same_host || same_job || stale) {
        return {LockAction::Take, true,
                fmt::format("taking over the lock of {}, which ended without releasing it", who)};
      }
      return {LockAction::Refuse, true,
              fmt::format("held by {} (this file system's locks do not reach that host: NFS "
                          "mounted nolock or Lustre localflock, so its fresh record counts)",
                          who)};
    case OsLock::HeldElsewhere:
      if (same_job && !same_host && stale) {
        return {LockAction::Take, false,
                fmt::format("taking over from {}: the same Slurm job, whose node stopped "
                            "beating; the file server still holds its lock, so this run "
                            "relies on the record alone",
                            who)};
      }
      if (same_job) return {LockAction::Wait, true, "held by " + who + " (the same Slurm job)"};
      return {LockAction::Refuse, true, held ? "held by " + who : "held by a running process"};
    case OsLock::Unsupported:
      if (!held)
        return {LockAction::Take, false, "this file system has no locks: the record alone"};
      if (same_host ? !alive : (same_job || stale)) {
        return {LockAction::Take, false,
                fmt::format("taking over the lock of {}, which ended without releasing it (this "
                            "file system has no locks: the record alone)",
                            who)};
      }
      return {LockAction::Refuse, false, "held by " + who + " (this file system has no locks)"};
  }
  return {LockAction::Refuse, true, "unknown lock state"};
}

std::optional<LockHolder> read_lock_record(const std::string& dir, const LockedDir& kind) {
  const std::string path = (fs::path(dir) / kind.file_name).string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  auto r = read_record_fd(fd);
  ::close(fd);
  return r;
}

std::unique_ptr<DirLock> DirLock::acquire(const std::string& dir, std::vector<std::string>* notes,
                                          const LockedDir& kind) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw UserError(fmt::format("{} {}: cannot create the directory: {}; pass a writable {}",
                                kind.flag, dir, ec.message(), kind.flag));
  }
  const std::string path = (fs::path(dir) / kind.file_name).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw UserError(fmt::format("{} {}: cannot open its lock file {}: {}; pass a writable {}",
                                kind.flag, dir, path, std::strerror(errno), kind.flag));
  }
  const LockHolder me = this_process_as_holder();
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    int err = 0;
    const OsLock os = os_lock(fd, true, &err);
    const std::optional<LockHolder> record = read_record_fd(fd);
    const bool alive = record && record->host == me.host && pid_alive(record->pid);
    const LockDecision d = decide_lock(os, record, me, alive);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (d.action == LockAction::Wait && waited < kLockSameJobWaitSeconds) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    if (d.action != LockAction::Take) {
      ::close(fd);
      throw UserError(fmt::format(
          "{} {} is in use: {}. One run writes {} at a time ({}): pass another {}, or wait for "
          "that run to end{}",
          kind.flag, dir, d.note, kind.what, kind.why, kind.flag,
          os == OsLock::HeldElsewhere
              ? ""
              : fmt::format(" (a record whose heartbeat stops counts as gone after {:.0f} s)",
                            kLockStaleSeconds)));
    }
    if (os == OsLock::Unsupported) {
      notes->push_back(fmt::format("{}: fcntl locks are not supported here ({}): {}", path,
                                   std::strerror(err), d.note));
    } else if (!d.note.empty()) {
      notes->push_back(fmt::format("{} {}: {}", kind.flag, dir, d.note));
    }
    write_record(fd, me, path, kind);
    return std::unique_ptr<DirLock>(new DirLock(path, fd, kind));
  }
}

namespace {

// What acquire() would decide for dir now, read without taking or writing anything. nullopt:
// no lock file yet (no run has held it: free).
struct LockVerdict {
  OsLock os = OsLock::Acquired;
  int err = 0;
  std::string path;
  LockDecision decision;
};
std::optional<LockVerdict> verdict_of(const std::string& dir, const LockedDir& kind) {
  LockVerdict v;
  v.path = (fs::path(dir) / kind.file_name).string();
  const int fd = ::open(v.path.c_str(), O_RDONLY | O_CLOEXEC);  // never created, never written
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;  // no run has held it
    throw UserError(fmt::format("{} {}: cannot open its lock file {}: {}; pass a writable {}",
                                kind.flag, dir, v.path, std::strerror(errno), kind.flag));
  }
  v.os = os_lock(fd, false, &v.err);  // asked, not taken
  const std::optional<LockHolder> record = read_record_fd(fd);
  ::close(fd);
  const LockHolder me = this_process_as_holder();
  const bool alive = record && record->host == me.host && pid_alive(record->pid);
  v.decision = decide_lock(v.os, record, me, alive);
  return v;
}

}  // namespace

void DirLock::check(const std::string& dir, std::vector<std::string>* notes,
                    const LockedDir& kind) {
  const std::optional<LockVerdict> v = verdict_of(dir, kind);
  if (!v) return;
  const LockDecision& d = v->decision;
  if (d.action == LockAction::Refuse) {
    throw UserError(fmt::format(
        "{} {} is in use: {}. One run writes {} at a time ({}): pass another {}, or wait for "
        "that run to end",
        kind.flag, dir, d.note, kind.what, kind.why, kind.flag));
  }
  if (d.action == LockAction::Wait) {
    notes->push_back(fmt::format("{} {}: {}; a run would wait up to {:.0f} s for it to finish",
                                 kind.flag, dir, d.note, kLockSameJobWaitSeconds));
  } else if (v->os == OsLock::Unsupported) {
    notes->push_back(fmt::format("{}: fcntl locks are not supported here ({}): {}", v->path,
                                 std::strerror(v->err), d.note));
  } else if (!d.note.empty()) {
    notes->push_back(fmt::format("{} {}: {}", kind.flag, dir, d.note));
  }
}

std::string DirLock::holder_if_held(const std::string& dir, const LockedDir& kind) {
  std::optional<LockVerdict> v;
  try {
    v = verdict_of(dir, kind);
  } catch (const UserError&) {
    return "";  // unreadable: no holder can be named (a visitor that writes there says why)
  }
  if (!v || v->decision.action == LockAction::Take) return "";
  return v->decision.note;
}

DirLock::DirLock(std::string path, int fd, const LockedDir& kind)
    : path_(std::move(path)), fd_(fd), kind_(kind) {
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

void DirLock::heartbeat_loop() {
  std::unique_lock<std::mutex> lk(mutex_);
  while (!wake_.wait_for(lk, std::chrono::duration<double>(kLockHeartbeatSeconds),
                         [this] { return stop_; })) {
    ::futimens(fd_, nullptr);  // mtime = now: the holder is alive
  }
}

DirLock::~DirLock() {
  {
    const std::lock_guard<std::mutex> lk(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  // Released: the next run takes the directory without a word. A failure here only leaves a
  // record the next run takes over (its OS lock goes when the descriptor closes).
  try {
    LockHolder done = this_process_as_holder();
    done.state = "released";
    write_record(fd_, done, path_, kind_);
  } catch (const UserError&) {
  }
  ::close(fd_);
}

}  // namespace mnist_ddp
