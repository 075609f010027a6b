// signals.cpp — the async-signal-safe stop flag (its step-boundary agreement: comm/agree.cpp).
#include "mnist_ddp/process/signals.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace mnist_ddp {
namespace {

volatile std::sig_atomic_t g_signal = 0;
// The exit status the run has decided on (-1: none yet). Once set, a stop signal is the launcher
// ending a rank that is leaving anyway (Open MPI's mpirun and Slurm's srun SIGTERM the others
// when one task exits non-zero): it ends the process with that status, and nothing is dumped.
// Written by the main thread, read by handlers on any thread: a lock-free atomic.
std::atomic<int> g_decided_exit{-1};
// Set by the recorder's thread of control, read by handlers on any thread: a lock-free atomic.
std::atomic<int> g_dump_fd{-1};
static_assert(std::atomic<int>::is_always_lock_free, "read from a signal handler");

void poke_dump_pipe(int signo) {
  const int fd = g_dump_fd.load();
  if (fd < 0) return;
  const unsigned char byte = static_cast<unsigned char>(signo);
  const int saved = errno;  // a handler must leave errno as it found it
  [[maybe_unused]] const ssize_t n = write(fd, &byte, 1);
  errno = saved;
}

extern "C" void on_dump_signal(int signo) {
  poke_dump_pipe(signo);
}

extern "C" void on_stop_signal(int signo) {
  const int decided = g_decided_exit.load();
  // The job is over on every rank: leave at once with the agreed status (_exit is
  // async-signal-safe; nothing is left to flush, dump or rename).
  if (decided >= 0) _exit(decided);
  if (g_signal != 0) {
    // Second signal: stop now. _exit is async-signal-safe; nothing is flushed or renamed.
    _exit(128 + signo);
  }
  g_signal = signo;
  poke_dump_pipe(signo);
}

void install(int signo, void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a signal must not make a blocking read/MPI call fail
  sigaction(signo, &sa, nullptr);
}

}  // namespace

void install_stop_handlers() {
  install(SIGINT, on_stop_signal);
  install(SIGTERM, on_stop_signal);
}

void install_requeue_handler(int signo) {
  install(signo, on_stop_signal);
}

void decide_exit(int code) {
  // What this rank printed goes out before a launcher's signal can end it.
  std::fflush(nullptr);
  g_decided_exit.store(code < 0 ? 1 : code);
}

bool exit_decided() {
  return g_decided_exit.load() >= 0;
}

void set_flight_dump_pipe(int fd) {
  g_dump_fd.store(fd);
}

void install_dump_handler(int signo) {
  install(signo, on_dump_signal);
}

int parse_signal(const std::string& name) {
  if (name == "USR1") return SIGUSR1;
  if (name == "USR2") return SIGUSR2;
  if (name == "TERM") return SIGTERM;
  if (name == "HUP") return SIGHUP;
  return 0;
}

int stop_signal_received() {
  return static_cast<int>(g_signal);
}

const char* signal_flag_name(int signo) {
  const char* n = signal_name(signo);
  return std::strncmp(n, "SIG", 3) == 0 ? n + 3 : n;
}

const char* signal_name(int signo) {
  switch (signo) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "signal";
  }
}

}  // namespace mnist_ddp
