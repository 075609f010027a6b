// mpi_main.cpp — the GoogleTest main of the MPI suite (run under mpirun -np 2 and -np 4
// --oversubscribe): MPI_Init, the world communicator, only rank 0 prints the progress, every
// other rank prints its own failures (tagged with its rank), any rank's failure fails the suite,
// then the world communicator and MPI are torn down in that order.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/launch/identity.hpp"
#include "world.hpp"

namespace {

// On ranks other than 0, in place of GoogleTest's printer: each failed assertion and each failed
// test, tagged "[rank N]" (a failure on rank 3 alone must say what failed, not only that the
// suite did). Every line carries the tag; one fputs per failure.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : tag_("[rank " + std::to_string(rank) + "] ") {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::string line = tag_ + (r.file_name() ? r.file_name() : "?") + ":" +
                       std::to_string(r.line_number()) + ": Failure\n" + tag_;
    for (const char* c = r.message(); *c; ++c)
      line += *c == '\n' ? "\n" + tag_ : std::string(1, *c);
    line += "\n";
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    if (!t.result()->Failed()) return;
    const std::string line = tag_ + "[  FAILED  ] " + t.test_suite_name() + "." + t.name() + "\n";
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  }

 private:
  std::string tag_;
};

}  // namespace

int main(int argc, char** argv) {
  mnist_ddp::mpi_init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mnist_ddp::set_error_identity(rank, mnist_ddp::host_name());
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));  // GoogleTest owns it
  }
  mnist_ddp::set_world(mnist_ddp::make_mpi_comm());
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  mnist_ddp::set_world(nullptr);
  // Collective: the suite fails if any rank saw a failure (rank 0 alone prints).
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && failed) std::printf("mpi_tests: a failure was reported on at least one rank\n");
  std::error_code ec;
  if (rank == 0)
    std::filesystem::remove_all(
        std::filesystem::temp_directory_path() / ("mnist_ddp_mpi_" + std::to_string(getppid())),
        ec);
  MPI_Finalize();
  // tests/run_sanitized.sh's canary: one block no pointer reaches at exit, which LeakSanitizer
  // must report under the options the MPI suite runs with (proof that those options still find
  // a leak of ours). The volatile store keeps the compiler from eliding the allocation.
  if (std::getenv("MNIST_DDP_LSAN_CANARY") != nullptr) {
    int* volatile canary = new int[16];
    canary[0] = rank;
    canary = nullptr;
  }
  return failed;
}
