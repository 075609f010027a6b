// requeue.cpp — scontrol requeue (requeue.hpp).
#include "mnist_ddp/process/requeue.hpp"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace mnist_ddp {

StopDecision decide_stop(int stop_signal, bool requeue, int requeue_signal) {
  StopDecision d;
  d.signal = stop_signal;
  if (stop_signal == 0) return d;
  d.requeue = requeue && stop_signal == requeue_signal;
  d.preemption = stop_signal == requeue_signal || stop_signal == SIGTERM;
  return d;
}

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

}  // namespace mnist_ddp
