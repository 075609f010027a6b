// requeue.cpp — scontrol requeue and the rolling preemption checkpoint (requeue.hpp).
#include "mnist_ddp/runtime/requeue.hpp"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/checkpoint/store.hpp"

extern char** environ;

namespace mnist_ddp {

bool request_slurm_requeue(std::string* what) {
  const char* id = std::getenv("SLURM_JOB_ID");
  const std::string job = id != nullptr ? id : "";
  if (job.empty() || !std::all_of(job.begin(), job.end(), ::isdigit)) {
    *what = "not under Slurm (no SLURM_JOB_ID): nothing to requeue";
    return false;
  }
  // posix_spawn with an argument vector: no shell, nothing in the job id is interpreted.
  std::string cmd = "scontrol", verb = "requeue";
  char* argv[] = {cmd.data(), verb.data(), const_cast<char*>(job.c_str()), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "scontrol", nullptr, nullptr, argv, environ);
  if (rc != 0) {
    *what = fmt::format("cannot run scontrol: {}", std::strerror(rc));
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    *what = fmt::format("scontrol requeue {}: the job goes back to the queue and resumes", job);
    return true;
  }
  *what = fmt::format(
      "scontrol requeue {} failed (exit {}); was the job submitted with --requeue (or does the "
      "cluster set JobRequeue=1)?",
      job, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return false;
}

std::string roll_preemption_checkpoint(const std::string& dir, const std::string& path) {
  namespace fs = std::filesystem;
  const char* id = std::getenv("SLURM_JOB_ID");
  const fs::path marker = fs::path(dir) / fmt::format(".preempt-{}", id != nullptr ? id : "local");
  std::string previous;
  if (std::ifstream in(marker); in) std::getline(in, previous);
  // The marker is replaced atomically, so a crash leaves either the old or the new record.
  const fs::path tmp = marker.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << path << "\n";
  }
  std::error_code ec;
  fs::rename(tmp, marker, ec);
  if (previous.empty() || previous == path) return {};
  // Only an older checkpoint of this directory is ever deleted: a stale record (a job id reused
  // by another cluster, an edited file) must not cost the user anything else.
  const auto files = list_checkpoints(dir);  // newest first
  const auto at_new = std::find(files.begin(), files.end(), path);
  const auto at_old = std::find(files.begin(), files.end(), previous);
  if (at_new == files.end() || at_old == files.end() || at_old < at_new) return {};
  // And only one of the same lineage (a directory shared with another run by hand).
  const std::string owner = checkpoint_run_id(previous);
  if (owner.empty() || owner != checkpoint_run_id(path)) return {};
  fs::remove(previous, ec);
  return ec ? std::string{} : previous;
}

}  // namespace mnist_ddp
