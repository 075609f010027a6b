// check.hpp — error checking: the typed user error caught in main, and one check macro per
// library (MPI here; the CUDA backend adds CUDA/cuDNN/cuBLAS/NCCL). A failed library call prints
// the expression, file:line, rank, host and the library's own error string, then aborts the job.
#pragma once

#include <stdexcept>
#include <string>

namespace mnist_ddp {

// Exit codes users and scripts can rely on (documented in the README and docs/outputs.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitUserError = 2;         // bad flag, bad data, launcher misconfiguration
inline constexpr int kExitReplicaDiverged = 3;   // --check-replicas found differing parameters
inline constexpr int kExitTrainingDiverged = 5;  // a non-finite loss or parameter (no checkpoint)

// A mistake the user can fix. The message names the file/flag and the fix. main() catches it,
// the ranks agree that something failed, one rank prints it once, and every rank exits with
// kExitUserError.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& what, int exit_code = kExitUserError)
      : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Records who we are so fatal messages can say "rank r on host h".
void set_error_identity(int rank, const std::string& host);

// A last word before a fatal error (fail_mpi, fail_internal, the CUDA/NCCL checks) aborts the job:
// the flight recorder's dump. Called at most once, with the error's text; nullptr: none.
using FatalHook = void (*)(const std::string& why, void* context);
void set_fatal_hook(FatalHook hook, void* context);

// A failed HDF5 call: the expression and HDF5's own error stack. Thrown (not fatal) because the
// checkpoint code turns it into a UserError naming the file (full disk, corrupt file, ...).
class Hdf5Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Collects HDF5's error stack (innermost messages, incl. errno text) and clears it.
std::string hdf5_error_text();
[[noreturn]] void throw_hdf5(const char* expr, const char* file, int line);

// Prints a fatal MPI failure (expression, location, rank, host, MPI's error string) and aborts
// every rank with MPI_Abort. Never returns.
[[noreturn]] void fail_mpi(int rc, const char* expr, const char* file, int line);

// Prints an internal (non-user) failure and aborts the whole job. Never returns.
[[noreturn]] void fail_internal(const std::string& what, const char* file, int line);

}  // namespace mnist_ddp

// Evaluates an MPI call once; on failure aborts the job with a full report.
#define MPI_CHECK(expr)                                                \
  do {                                                                 \
    const int mnist_ddp_rc_ = (expr);                                  \
    if (mnist_ddp_rc_ != 0) {                                          \
      ::mnist_ddp::fail_mpi(mnist_ddp_rc_, #expr, __FILE__, __LINE__); \
    }                                                                  \
  } while (0)

// Evaluates an HDF5 call once; a negative result throws Hdf5Error with HDF5's error stack.
#define HDF5_CHECK(expr)                                                       \
  ([&]() {                                                                     \
    const auto mnist_ddp_h5_ = (expr);                                         \
    if (mnist_ddp_h5_ < 0) ::mnist_ddp::throw_hdf5(#expr, __FILE__, __LINE__); \
    return mnist_ddp_h5_;                                                      \
  }())

// Internal invariant check (not for validating user input: use UserError for that).
#define MNIST_DDP_CHECK(cond, msg)                                                                \
  do {                                                                                            \
    if (!(cond)) ::mnist_ddp::fail_internal(std::string(#cond ": ") + (msg), __FILE__, __LINE__); \
  } while (0)
