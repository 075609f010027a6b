// staged_comm.cu — HostStagedComm: MPI collectives on device memory, staged through a host
// buffer (--comm mpi on a GPU). Slower than NCCL, but it lets several ranks share one GPU (NCCL
// refuses that), which is how multi-rank GPU runs are tested on a one-GPU machine.
#include <mpi.h>

#include <cstdlib>
#include <vector>

#include "mnist_ddp/check.hpp"
#include "mnist_ddp/comm.hpp"
#include "mnist_ddp/cuda_check.hpp"
#include "mnist_ddp/mpi_types.hpp"

namespace mnist_ddp {
namespace {

class HostStagedComm final : public Comm {
 public:
  HostStagedComm() {
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override { MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }
  // Alone, every collective here is a no-op; with peers it needs the host (MPI), which a graph
  // cannot hold.
  bool capturable() const override { return size_ == 1; }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::abort();
  }
  void allreduce_avg(std::span<float> d) override {
    // Sum over MPI on the host copy, divide there too, one copy back.
    if (size_ == 1 || d.empty()) return;
    stage_in(d.data(), d.size_bytes());
    auto* h = reinterpret_cast<float*>(host_.data());
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, h, static_cast<int>(d.size()), MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD));
    const float n = static_cast<float>(size_);
    for (std::size_t i = 0; i < d.size(); ++i) h[i] /= n;
    stage_out(d.data(), d.size_bytes());
  }

 protected:
  // The fingerprints are host memory and """+comment+""": MPI on the world.
  void fingerprint_allgather(const std::uint64_t* send, std::uint64_t* recv) override {
    // Collective (MPI): every rank's fingerprint of its next collective.
    MPI_CHECK(MPI_Allgather(send, 5, MPI_UINT64_T, recv, 5, MPI_UINT64_T, MPI_COMM_WORLD));
  }
  void allreduce_raw(void* data, std::size_t count, DType type, ReduceOp op) override {
    if (size_ == 1 || count == 0) return;
    stage_in(data, count * dtype_size(type));
    // Collective (MPI) on the host copy of the device buffer.
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, host_.data(), static_cast<int>(count), to_mpi_type(type),
                            to_mpi_op(op), MPI_COMM_WORLD));
    stage_out(data, count * dtype_size(type));
  }
  void broadcast_raw(void* data, std::size_t count, DType type, int root) override {
    if (size_ == 1 || count == 0) return;
    stage_in(data, count * dtype_size(type));
    // Collective (MPI) on the host copy; every rank's device buffer gets root's values.
    MPI_CHECK(
        MPI_Bcast(host_.data(), static_cast<int>(count), to_mpi_type(type), root, MPI_COMM_WORLD));
    stage_out(data, count * dtype_size(type));
  }
  void allgather_raw(const void* send, void* recv, std::size_t count, DType type) override {
    const std::size_t bytes = count * dtype_size(type);
    std::vector<unsigned char> in(bytes), out(bytes * static_cast<std::size_t>(size_));
    CUDA_CHECK(cudaMemcpy(in.data(), send, bytes, cudaMemcpyDeviceToHost));
    // Collective (MPI) on host copies; the gathered blocks go back to the device.
    MPI_CHECK(MPI_Allgather(in.data(), static_cast<int>(count), to_mpi_type(type), out.data(),
                            static_cast<int>(count), to_mpi_type(type), MPI_COMM_WORLD));
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
  int rank_ = 0;
  int size_ = 1;
  std::vector<unsigned char> host_;
};

}  // namespace

std::unique_ptr<Comm> make_host_staged_comm() {
  return std::make_unique<HostStagedComm>();
}

}  // namespace mnist_ddp
