// mpi_comm.cpp — MpiComm: Comm over an MPI communicator (the world, or a group split from it) on
// host memory.
#include <mpi.h>

#include <vector>

#include "dist/mpi_types.hpp"
#include "mnist_ddp/dist/comm.hpp"
#include "mnist_ddp/dist/compress.hpp"
#include "mnist_ddp/runtime/check.hpp"

namespace mnist_ddp {
namespace {

// MPI counts are int; our buffers are far below 2^31 elements, checked anyway.
int to_count(std::size_t n) {
  MNIST_DDP_CHECK(n <= 0x7fffffffu, "collective larger than 2^31 elements");
  return static_cast<int>(n);
}

// MPI user-defined reductions: element-wise sum of 16-bit floats, computed in float and rounded
// back (to nearest even), like a 16-bit all-reduce on the device.
extern "C" void sum_fp16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_fp16(from_fp16(a[i]) + from_fp16(b[i]));
}
extern "C" void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_bf16(from_bf16(a[i]) + from_bf16(b[i]));
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
    if (fp16_sum_ != MPI_OP_NULL) MPI_Op_free(&fp16_sum_);
    if (bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override { MPI_CHECK(MPI_Barrier(comm_)); }

  int start_allreduce_sum(std::span<float> d) override {
    return start(d.data(), d.size(), d.size_bytes(), MPI_FLOAT, MPI_SUM, "f32");
  }
  int start_allreduce_sum16(std::span<std::uint16_t> d, bool bf16) override {
    // MPI has no 16-bit float type: the encoding travels as uint16 and a user op sums it.
    MPI_Op& op = bf16 ? bf16_sum_ : fp16_sum_;
    if (op == MPI_OP_NULL) MPI_CHECK(MPI_Op_create(bf16 ? sum_bf16 : sum_fp16, 1, &op));
    return start(d.data(), d.size(), d.size_bytes(), MPI_UINT16_T, op, bf16 ? "bf16" : "fp16");
  }
  bool test(int request) override {
    if (request < 0) return true;
    MPI_Request& r = requests_[static_cast<std::size_t>(request)];
    if (r == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
    if (done != 0) watch_end(watched_[static_cast<std::size_t>(request)]);
    return done != 0;
  }
  void wait(int request) override {
    if (request < 0) return;
    MPI_Request& r = requests_[static_cast<std::size_t>(request)];
    if (r != MPI_REQUEST_NULL) MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    watch_end(watched_[static_cast<std::size_t>(request)]);
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
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, to_count(count), to_mpi_type(type), to_mpi_op(op),
                            comm_));
  }
  void broadcast_raw(void* data, std::size_t count, DType type, int root) override {
    if (size_ == 1 || count == 0) return;
    MPI_CHECK(MPI_Bcast(data, to_count(count), to_mpi_type(type), root, comm_));
  }
  void allgather_raw(const void* send, void* recv, std::size_t count, DType type) override {
    MPI_CHECK(MPI_Allgather(send, to_count(count), to_mpi_type(type), recv, to_count(count),
                            to_mpi_type(type), comm_));
  }

 private:
  // Collective (non-blocking): an in-place all-reduce progressed by test() calls from the
  // backward pass and completed by wait(). Returns the request index (-1: nothing to do).
  int start(void* data, std::size_t count, std::size_t bytes, MPI_Datatype type, MPI_Op op,
            const char* type_name) {
    count_bytes(bytes);
    if (size_ == 1 || count == 0) return -1;
    const std::uint64_t seq = watch_begin("iallreduce", count, DType::U8, type_name);
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, to_count(count), type, op, comm_, &req));
    requests_.push_back(req);
    watched_.push_back(seq);
    return static_cast<int>(requests_.size() - 1);
  }

  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<MPI_Request> requests_;
  std::vector<std::uint64_t> watched_;  // watchdog sequence number per request
  MPI_Op fp16_sum_ = MPI_OP_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
};

}  // namespace

MPI_Datatype to_mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::I32:
      return MPI_INT32_T;
    case DType::I64:
      return MPI_INT64_T;
    case DType::U64:
      return MPI_UINT64_T;
    case DType::U8:
      return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op to_mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return MPI_SUM;
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
  }
  return MPI_OP_NULL;
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64:
    case DType::U64:
      return 8;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::U8:
      return 1;
  }
  return 1;
}

std::unique_ptr<Comm> make_mpi_comm() {
  return std::make_unique<MpiComm>(MPI_COMM_WORLD, false);
}

MPI_Comm split_world(int color) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_Comm group = MPI_COMM_NULL;
  // Collective: every rank of the job names its group; ranks keep their world order inside it.
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, rank, &group));
  return group;
}

std::unique_ptr<Comm> make_mpi_group_comm(int color) {
  return std::make_unique<MpiComm>(split_world(color), true);
}

}  // namespace mnist_ddp
