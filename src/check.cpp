// check.cpp — fatal-error reporting for library failures and internal invariants.
#include "mnist_ddp/check.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace mnist_ddp {
namespace {
int g_rank = -1;
std::string g_host = "?";
}  // namespace

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
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

[[noreturn]] void fail_internal(const std::string& what, const char* file, int line) {
  std::fprintf(stderr, "mnist_ddp: internal error on rank %d (host %s) at %s:%d: %s\n", g_rank,
               g_host.c_str(), file, line, what.c_str());
  std::fflush(stderr);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

}  // namespace mnist_ddp
