// nccl_comm.cu — NcclComm: Comm over NCCL on device memory, on its own CUDA stream, bootstrapped
// from MPI (rank 0: ncclGetUniqueId -> MPI_Bcast -> every rank: ncclCommInitRank; no ports).
// Unbound, every call completes before returning (stream synchronised), like MpiComm; bound to
// the ops' stream (bind_stream), the collectives are joined to it by events instead, so the
// training step with its NCCL calls can be captured in a CUDA graph.
#include <mpi.h>

#include <cstdlib>

#include "mnist_ddp/check.hpp"
#include "mnist_ddp/comm.hpp"
#include "mnist_ddp/cuda_check.hpp"

namespace mnist_ddp {
namespace {

ncclDataType_t to_nccl(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
    case DType::U64:
      return ncclUint64;
    case DType::U8:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
  }
  return ncclSum;
}

__global__ void divide_kernel(float* x, std::size_t n, float by) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = x[i] / by;
}

class NcclComm final : public Comm {
 public:
  NcclComm() {
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    ncclUniqueId id{};
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    // Collective (MPI): the one piece of bootstrap state NCCL needs, no ports or files.
    MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    // A blocking stream: ordered after the compute the ops issue on the legacy default stream.
    CUDA_CHECK(cudaStreamCreate(&stream_));
    NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  }
  ~NcclComm() override {
    // Teardown order: the communicator before the stream (and both before MPI_Finalize in main).
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (forked_ != nullptr) cudaEventDestroy(forked_);
    if (joined_ != nullptr) cudaEventDestroy(joined_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  void bind_stream(void* stream) override {
    compute_ = static_cast<cudaStream_t>(stream);
    if (compute_ != nullptr && forked_ == nullptr) {
      CUDA_CHECK(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming));
    }
  }
  bool capturable() const override { return compute_ != nullptr; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void barrier() override {
    // Sync: this rank's device work (collectives and, when bound, compute) has finished.
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (compute_ != nullptr) CUDA_CHECK(cudaStreamSynchronize(compute_));
    // Collective: the host-side barrier after this rank's device work has finished.
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  }
  [[noreturn]] void abort(int code) override {
    // ncclCommAbort releases peers blocked in a collective; MPI_Abort ends the processes.
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    MPI_Abort(MPI_COMM_WORLD, code);
    std::abort();
  }
  void allreduce_avg(std::span<float> d) override {
    allreduce(d, ReduceOp::Sum);
    if (d.empty()) return;
    // Sum, then divide (not multiply by 1/size), on the device, in the communicator's stream.
    const unsigned blocks = static_cast<unsigned>((d.size() + 255) / 256);
    begin();
    divide_kernel<<<blocks, 256, 0, stream_>>>(d.data(), d.size(), static_cast<float>(size_));
    CUDA_CHECK(cudaGetLastError());
    complete();
  }

 protected:
  // The fingerprints are host memory and """+comment+""": MPI on the world.
  void fingerprint_allgather(const std::uint64_t* send, std::uint64_t* recv) override {
    // Collective (MPI): every rank's fingerprint of its next collective.
    MPI_CHECK(MPI_Allgather(send, 5, MPI_UINT64_T, recv, 5, MPI_UINT64_T, MPI_COMM_WORLD));
  }
  void allreduce_raw(void* data, std::size_t count, DType type, ReduceOp op) override {
    if (count == 0) return;
    begin();
    NCCL_CHECK(ncclAllReduce(data, data, count, to_nccl(type), to_nccl(op), comm_, stream_));
    complete();
  }
  void broadcast_raw(void* data, std::size_t count, DType type, int root) override {
    if (count == 0) return;
    begin();
    NCCL_CHECK(ncclBroadcast(data, data, count, to_nccl(type), root, comm_, stream_));
    complete();
  }
  void allgather_raw(const void* send, void* recv, std::size_t count, DType type) override {
    begin();
    NCCL_CHECK(ncclAllGather(send, recv, count, to_nccl(type), comm_, stream_));
    complete();
  }

 private:
  // Bound: the collective waits for the compute that produced its input (an event, no host
  // sync; recorded into a graph while the compute stream is being captured).
  void begin() {
    if (compute_ == nullptr) return;
    CUDA_CHECK(cudaEventRecord(forked_, compute_));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, forked_, 0));
  }
  // Bound: the compute stream waits for the collective (an event: what follows on the stream,
  // and any legacy-stream copy to the host, sees the result). Unbound: sync, like MpiComm, so a
  // host caller may use the result at once.
  void complete() {
    if (compute_ != nullptr) {
      CUDA_CHECK(cudaEventRecord(joined_, stream_));
      CUDA_CHECK(cudaStreamWaitEvent(compute_, joined_, 0));
      return;
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  int rank_ = 0;
  int size_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_ = nullptr;  // the ops' stream once bound
  cudaEvent_t forked_ = nullptr;    // compute -> NCCL
  cudaEvent_t joined_ = nullptr;    // NCCL -> compute
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm() {
  return std::make_unique<NcclComm>();
}

}  // namespace mnist_ddp
