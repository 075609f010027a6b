// mpi_comm.cpp — MpiComm: Comm over an MPI communicator (the world, or a group split from it) on
// host memory.
#include <mpi.h>

#include <utility>
#include <vector>

#include "comm/mpi_types.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

// MPI counts are int; our buffers are far below 2^31 elements, checked anyway.
int to_count(std::size_t n) {
  MNIST_DDP_CHECK(n <= 0x7fffffffu, "collective larger than 2^31 elements");
  return static_cast<int>(n);
}

class MpiComm final : public Comm {
 public:
  // comm: MPI_COMM_WORLD, or a communicator this object owns (freed with it).
  explicit MpiComm(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }
  ~MpiComm() override {
    // The user ops die with the communicator, before MPI_Finalize (main's teardown order).
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (owned_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override { MPI_CHECK(MPI_Barrier(comm_)); }

  bool test(int request) override {
    if (request < 0) return true;
    MPI_Request& r = requests_[static_cast<std::size_t>(request)];
    if (r == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
    if (done != 0) {
      // Ended once, here, when it completed (wait() then finds 0 and records nothing).
      watch_end(std::exchange(watched_[static_cast<std::size_t>(request)], 0));
    }
    return done != 0;
  }
  void wait(int request) override {
    if (request < 0) return;
    MPI_Request& r = requests_[static_cast<std::size_t>(request)];
    if (r != MPI_REQUEST_NULL) MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    watch_end(std::exchange(watched_[static_cast<std::size_t>(request)], 0));
    // All of a step's requests are waited for before the next step starts new ones.
    bool all_done = true;
    for (const auto& q : requests_) all_done = all_done && q == MPI_REQUEST_NULL;
    if (all_done) {
      requests_.clear();
      watched_.clear();
    }
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::abort();
  }

 protected:
  void allreduce_raw(void* data, std::size_t count, DType type, ReduceOp op) override {
    if (size_ == 1 || count == 0) return;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, to_count(count), to_mpi_type(type),
                            half_ops_.op(op, type), comm_));
  }
  void broadcast_raw(void* data, std::size_t count, DType type, int root) override {
    if (size_ == 1 || count == 0) return;
    MPI_CHECK(MPI_Bcast(data, to_count(count), to_mpi_type(type), root, comm_));
  }
  void allgather_raw(const void* send, void* recv, std::size_t count, DType type) override {
    MPI_CHECK(MPI_Allgather(send, to_count(count), to_mpi_type(type), recv, to_count(count),
                            to_mpi_type(type), comm_));
  }
  // Collective (non-blocking): an in-place sum progressed by test() calls from the backward pass
  // and completed by wait(). Returns the request index (-1: nothing to do).
  int start_allreduce_raw(void* data, std::size_t count, DType type) override {
    if (size_ == 1 || count == 0) return -1;
    const std::uint64_t seq = watch_begin("iallreduce", count, type);
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, to_count(count), to_mpi_type(type),
                             half_ops_.op(ReduceOp::Sum, type), comm_, &req));
    requests_.push_back(req);
    watched_.push_back(seq);
    return static_cast<int>(requests_.size() - 1);
  }

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<MPI_Request> requests_;
  std::vector<std::uint64_t> watched_;  // watchdog sequence number per request
  MpiOps half_ops_;  // the reductions, 16-bit sums included (freed with the communicator)
};

}  // namespace

std::unique_ptr<Comm> make_mpi_comm() {
  return std::make_unique<MpiComm>(MPI_COMM_WORLD, false);
}

std::unique_ptr<Comm> make_mpi_group_comm(int color) {
  return std::make_unique<MpiComm>(split_world(color), true);
}

}  // namespace mnist_ddp
