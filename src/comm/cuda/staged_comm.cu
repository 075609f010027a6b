// staged_comm.cu — HostStagedComm: MPI collectives on device memory, staged through a host
// buffer (--comm mpi on a GPU). Slower than NCCL, but it lets several ranks share one GPU (NCCL
// refuses that), which is how multi-rank GPU runs are tested on a one-GPU machine.
#include <mpi.h>

#include <cstdlib>
#include <vector>

#include "comm/cuda/comm_kernels.hpp"
#include "comm/mpi_types.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/diagnostics/cuda/cuda_check.hpp"

namespace mnist_ddp {
namespace {

class HostStagedComm final : public Comm {
 public:
  // mpi: the ranks of this communicator (the world, or a group it owns and frees).
  HostStagedComm(MPI_Comm mpi, bool owns) : mpi_(mpi), owns_(owns) {
    MPI_CHECK(MPI_Comm_rank(mpi_, &rank_));
    MPI_CHECK(MPI_Comm_size(mpi_, &size_));
  }
  ~HostStagedComm() override {
    if (owns_) MPI_Comm_free(&mpi_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override { MPI_CHECK(MPI_Barrier(mpi_)); }
  // Alone, every collective here is a no-op (nothing touches the host or another stream); with
  // peers it needs the host (MPI), which a graph cannot hold.
  bool capturable() const override { return size_ == 1; }
  bool device_memory() const override { return true; }
  const char* transport() const override { return "host-staged MPI"; }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);  // the whole job, not only this group
    std::abort();
  }
  void allreduce_avg(std::span<float> d) override {
    // Sum over MPI on the host copy, divide there too, one copy back.
    if (size_ == 1 || d.empty()) return;
    stage_in(d.data(), d.size_bytes());
    auto* h = reinterpret_cast<float*>(host_.data());
    // Collective (MPI) on the host copy of the device buffer.
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, h, static_cast<int>(d.size()), MPI_FLOAT, MPI_SUM, mpi_));
    const float n = static_cast<float>(size_);
    for (std::size_t i = 0; i < d.size(); ++i) h[i] /= n;
    stage_out(d.data(), d.size_bytes());
  }
  // The Reducer's buckets: start_allreduce_sum (the base's blocking allreduce, staged) has
  // already summed the bucket in device memory; the division runs on the device too (the base
  // class would divide device memory from the host). Alone there is nothing to divide, and
  // nothing may run outside the captured stream.
  void finish_allreduce_avg(int request, std::span<float> d) override {
    wait(request);
    if (size_ == 1 || d.empty()) return;
    // The legacy default stream: ordered after the staging copies and before the optimizer
    // kernels on the ops' blocking stream.
    divide_on_device(d.data(), d.size(), static_cast<float>(size_), cudaStreamLegacy);
  }

 protected:
  // The fingerprints are host memory: MPI on this communicator's ranks.
  void fingerprint_allgather(const std::uint64_t* send, std::uint64_t* recv) override {
    // Collective (MPI): every rank's fingerprint of its next collective.
    MPI_CHECK(MPI_Allgather(send, 5, MPI_UINT64_T, recv, 5, MPI_UINT64_T, mpi_));
  }
  void allreduce_raw(void* data, std::size_t count, DType type, ReduceOp op) override {
    if (size_ == 1 || count == 0) return;
    stage_in(data, count * dtype_size(type));
    // Collective (MPI) on the host copy of the device buffer.
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, host_.data(), static_cast<int>(count), to_mpi_type(type),
                            ops_.op(op, type), mpi_));
    stage_out(data, count * dtype_size(type));
  }
  void broadcast_raw(void* data, std::size_t count, DType type, int root) override {
    if (size_ == 1 || count == 0) return;
    stage_in(data, count * dtype_size(type));
    // Collective (MPI) on the host copy; every rank's device buffer gets root's values.
    MPI_CHECK(MPI_Bcast(host_.data(), static_cast<int>(count), to_mpi_type(type), root, mpi_));
    stage_out(data, count * dtype_size(type));
  }
  void allgather_raw(const void* send, void* recv, std::size_t count, DType type) override {
    const std::size_t bytes = count * dtype_size(type);
    std::vector<unsigned char> in(bytes), out(bytes * static_cast<std::size_t>(size_));
    CUDA_CHECK(cudaMemcpy(in.data(), send, bytes, cudaMemcpyDeviceToHost));
    // Collective (MPI) on host copies; the gathered blocks go back to the device.
    MPI_CHECK(MPI_Allgather(in.data(), static_cast<int>(count), to_mpi_type(type), out.data(),
                            static_cast<int>(count), to_mpi_type(type), mpi_));
    CUDA_CHECK(cudaMemcpy(recv, out.data(), out.size(), cudaMemcpyHostToDevice));
  }

 private:
  // Sync: cudaMemcpy on the legacy default stream waits for the compute that produced the data
  // (the ops run there) and finishes before MPI reads the host copy.
  void stage_in(const void* device, std::size_t bytes) {
    if (host_.size() < bytes) host_.resize(bytes);
    CUDA_CHECK(cudaMemcpy(host_.data(), device, bytes, cudaMemcpyDeviceToHost));
  }
  void stage_out(void* device, std::size_t bytes) {
    CUDA_CHECK(cudaMemcpy(device, host_.data(), bytes, cudaMemcpyHostToDevice));
  }
  MPI_Comm mpi_;
  bool owns_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<unsigned char> host_;
  MpiOps ops_;  // the reductions, 16-bit sums included
};

}  // namespace

std::unique_ptr<Comm> make_host_staged_comm() {
  return std::make_unique<HostStagedComm>(MPI_COMM_WORLD, false);
}

std::unique_ptr<Comm> make_host_staged_group_comm(int color) {
  // Collective (MPI): the world split by color.
  return std::make_unique<HostStagedComm>(split_world(color), true);
}

}  // namespace mnist_ddp
