// check.cpp — fatal-error reporting for library failures and internal invariants.
#include "mnist_ddp/diagnostics/check.hpp"

#include <hdf5.h>
#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace mnist_ddp {
namespace {
int g_rank = -1;
std::string g_host = "?";
// Set while the recorder lives; read by whichever thread fails.
std::atomic<FatalHook> g_fatal_hook{nullptr};
std::atomic<void*> g_fatal_context{nullptr};
std::atomic<bool> g_fatal_hook_ran{false};

void run_fatal_hook(const std::string& why) {
  const FatalHook hook = g_fatal_hook.load();
  // Once: a failure inside the hook, or a second thread failing, goes straight to the abort.
  if (hook != nullptr && !g_fatal_hook_ran.exchange(true)) hook(why, g_fatal_context.load());
}
}  // namespace

void set_fatal_hook(FatalHook hook, void* context) {
  g_fatal_context.store(context);
  g_fatal_hook.store(hook);
}

void set_error_identity(int rank, const std::string& host) {
  g_rank = rank;
  g_host = host;
}

[[noreturn]] void fail_mpi(int rc, const char* expr, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    std::snprintf(text, sizeof text, "code %d", rc);
  std::fprintf(stderr, "mnist_ddp: fatal MPI error on rank %d (host %s): %s failed at %s:%d: %s\n",
               g_rank, g_host.c_str(), expr, file, line, text);
  std::fflush(stderr);
  run_fatal_hook(std::string("fatal MPI error: ") + expr + ": " + text);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

[[noreturn]] void fail_internal(const std::string& what, const char* file, int line) {
  std::fprintf(stderr, "mnist_ddp: internal error on rank %d (host %s) at %s:%d: %s\n", g_rank,
               g_host.c_str(), file, line, what.c_str());
  std::fflush(stderr);
  run_fatal_hook("internal error: " + what);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

namespace {
struct Hdf5Errors {
  std::string os_cause;  // e.g. "No space left on device" from the file driver
  std::string text;
};
herr_t collect_hdf5_error(unsigned n, const H5E_error2_t* e, void* out) {
  auto* errs = static_cast<Hdf5Errors*>(out);
  if (e->desc == nullptr || e->desc[0] == '\0') return 0;
  const std::string desc = e->desc;
  // The sec2 driver embeds errno's text: "..., error message = 'No space left on device', ...".
  if (const auto at = desc.find("error message = '"); at != std::string::npos) {
    const auto from = at + 17;
    errs->os_cause = desc.substr(from, desc.find('\'', from) - from);
  } else if (!errs->text.ends_with(desc) && n < 4) {
    if (!errs->text.empty()) errs->text += "; ";
    errs->text += desc;
  }
  return 0;
}
}  // namespace

std::string hdf5_error_text() {
  Hdf5Errors errs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_hdf5_error, &errs);
  H5Eclear2(H5E_DEFAULT);
  if (!errs.os_cause.empty()) return errs.os_cause + " (HDF5: " + errs.text + ")";
  return errs.text.empty() ? "unknown HDF5 error" : errs.text;
}

[[noreturn]] void throw_hdf5(const char* expr, const char* file, int line) {
  throw Hdf5Error(std::string(expr) + " failed (" + file + ":" + std::to_string(line) +
                  "): " + hdf5_error_text());
}

}  // namespace mnist_ddp
