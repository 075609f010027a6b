// nccl_comm.cu — NcclComm: Comm over NCCL on device memory, on its own CUDA stream, bootstrapped
// from MPI (rank 0: ncclGetUniqueId -> MPI_Bcast -> every rank: ncclCommInitRank; no ports).
// Unbound, every call completes before returning (stream synchronised), like MpiComm; bound to
// the ops' stream (bind_stream), the collectives are joined to it by events instead, so the
// training step with its NCCL calls can be captured in a CUDA graph.
#include <mpi.h>

#include <cstdlib>
#include <vector>

#include "comm/cuda/comm_kernels.hpp"
#include "comm/mpi_types.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/diagnostics/cuda/cuda_check.hpp"
#include "mnist_ddp/ops/cuda/capture.hpp"

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
    case DType::F16:
      return ncclFloat16;
    case DType::BF16:
      return ncclBfloat16;
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

class NcclComm final : public Comm {
 public:
  // mpi: the ranks of this communicator (the world, or a group it owns and frees).
  explicit NcclComm(MPI_Comm mpi, bool owns) : mpi_(mpi), owns_(owns) {
    MPI_CHECK(MPI_Comm_rank(mpi_, &rank_));
    MPI_CHECK(MPI_Comm_size(mpi_, &size_));
    ncclUniqueId id{};
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    // Collective (MPI): the one piece of bootstrap state NCCL needs, no ports or files.
    MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi_));
    // The collectives' own stream; ordered after the ops' stream by events once bound
    // (bind_stream), by a device sync before each collective until then.
    CUDA_CHECK(cudaStreamCreate(&stream_));
    NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));  // no communicator to abort yet
  }
  ~NcclComm() override {
    // Teardown order: the communicator before the stream (and both before MPI_Finalize in main).
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    for (cudaEvent_t e : done_) cudaEventDestroy(e);
    if (forked_ != nullptr) cudaEventDestroy(forked_);
    if (joined_ != nullptr) cudaEventDestroy(joined_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (owns_) MPI_Comm_free(&mpi_);
  }
  void bind_stream(void* stream) override {
    compute_ = static_cast<cudaStream_t>(stream);
    if (compute_ != nullptr && forked_ == nullptr) {
      CUDA_CHECK(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming));
    }
  }
  bool capturable() const override { return compute_ != nullptr; }
  void* collective_stream() const override { return stream_; }
  bool device_memory() const override { return true; }
  const char* transport() const override { return "NCCL stream"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void barrier() override {
    // Sync: this rank's device work (collectives and, when bound, compute) has finished.
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (compute_ != nullptr) CUDA_CHECK(cudaStreamSynchronize(compute_));
    // Collective: the host-side barrier after this rank's device work has finished.
    MPI_CHECK(MPI_Barrier(mpi_));
  }
  [[noreturn]] void abort(int code) override {
    // ncclCommAbort releases peers blocked in a collective; MPI_Abort ends the processes.
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    MPI_Abort(MPI_COMM_WORLD, code);
    std::abort();
  }
  // Bound: never polled from the host (an event query is not allowed while a step is being
  // captured, and NCCL progresses on the GPU by itself). Unbound: whether it has finished.
  bool test(int request) override {
    if (request < 0) return true;
    if (compute_ != nullptr) return false;
    return cudaEventQuery(done_[static_cast<std::size_t>(request)]) == cudaSuccess;
  }
  void wait(int request) override {
    if (request < 0) return;
    const cudaEvent_t e = done_[static_cast<std::size_t>(request)];
    if (compute_ != nullptr) {
      // Sync (device only): what follows on the compute stream sees the reduced bucket.
      CUDA_CHECK(cudaStreamWaitEvent(compute_, e, 0));
    } else {
      CUDA_CHECK(cudaEventSynchronize(e));
    }
    if (++waited_ < next_request_) return;
    next_request_ = waited_ = 0;  // the step's last request
    // Sync (device only): the compute stream also joins what was enqueued on the NCCL stream
    // behind the last all-reduce's event (the timeline stamp that ends its span, see
    // Reducer::launch). A capture ends only when every stream forked into it has joined the
    // origin (cudaErrorStreamCaptureUnjoined otherwise: a traced step would lose its graph), and
    // the stamp is read after a sync of the compute stream. Every bucket is awaited by now, so
    // no overlap is lost.
    if (compute_ != nullptr) complete();
  }
  void finish_allreduce_avg(int request, std::span<float> d) override {
    wait(request);
    if (d.empty()) return;
    // Sum, then divide, on the stream the result is used from next.
    divide_on_device(d.data(), d.size(), static_cast<float>(size_),
                     compute_ != nullptr ? compute_ : stream_);
    if (compute_ == nullptr) CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void allreduce_avg(std::span<float> d) override {
    allreduce(d, ReduceOp::Sum);
    if (d.empty()) return;
    // Sum, then divide (not multiply by 1/size), on the device, in the communicator's stream.
    begin();
    divide_on_device(d.data(), d.size(), static_cast<float>(size_), stream_);
    complete();
  }

 protected:
  // The fingerprints are host memory: MPI on the world.
  void fingerprint_allgather(const std::uint64_t* send, std::uint64_t* recv) override {
    // Collective (MPI): every rank's fingerprint of its next collective.
    MPI_CHECK(MPI_Allgather(send, 5, MPI_UINT64_T, recv, 5, MPI_UINT64_T, mpi_));
  }
  void allreduce_raw(void* data, std::size_t count, DType type, ReduceOp op) override {
    if (count == 0) return;
    begin();
    NCCL_COMM_CHECK(ncclAllReduce(data, data, count, to_nccl(type), to_nccl(op), comm_, stream_),
                    comm_);
    complete();
  }
  void broadcast_raw(void* data, std::size_t count, DType type, int root) override {
    if (count == 0) return;
    begin();
    NCCL_COMM_CHECK(ncclBroadcast(data, data, count, to_nccl(type), root, comm_, stream_), comm_);
    complete();
  }
  void allgather_raw(const void* send, void* recv, std::size_t count, DType type) override {
    begin();
    NCCL_COMM_CHECK(ncclAllGather(send, recv, count, to_nccl(type), comm_, stream_), comm_);
    complete();
  }
  // The Reducer's bucket all-reduces (f32, or the fp16/bf16 hooks' encodings Ops made): started
  // on the NCCL stream as soon as backward produced the bucket (after the compute that wrote
  // it), with an event recorded behind each, so backward of the earlier layers runs on the
  // compute stream meanwhile. The compute stream joins a bucket only in wait() /
  // finish_allreduce_avg, before the optimizer step. No host sync: capturable.
  int start_allreduce_raw(void* data, std::size_t count, DType type) override {
    const auto seq = watch_begin("allreduce", count, type);
    const int r = new_request();
    begin();
    if (count > 0) {
      // Collective: this bucket summed over ranks in its own type, on the NCCL stream.
      NCCL_COMM_CHECK(ncclAllReduce(data, data, count, to_nccl(type), ncclSum, comm_, stream_),
                      comm_);
    }
    CUDA_CHECK(cudaEventRecord(done_[static_cast<std::size_t>(r)], stream_));
    watch_end(seq);  // enqueued; the GPU completes it asynchronously
    return r;
  }

 protected:
  // A capture that failed part-way took requests that never ran: the eager rerun starts at 0.
  // Ending the compute stream's capture releases the NCCL stream forked into it; should it still
  // be capturing (the failure came before the join), its part is ended and dropped here.
  // Bound, the host only enqueues: the GPU completes the collective later.
  FlightState done_state() const override {
    return compute_ != nullptr ? FlightState::Enqueued : FlightState::Completed;
  }
  void rewind_step() override {
    next_request_ = waited_ = 0;
    abandon_capture(stream_);
  }

 private:
  // The next request of this step, with its completion event (created on the first, eager step;
  // a captured step reuses them).
  int new_request() {
    const int r = next_request_++;
    if (static_cast<std::size_t>(r) == done_.size()) {
      done_.emplace_back();
      CUDA_CHECK(cudaEventCreateWithFlags(&done_.back(), cudaEventDisableTiming));
    }
    return r;
  }
  // Bound: the collective waits for the compute that produced its input (an event, no host
  // sync; recorded into a graph while the compute stream is being captured). Unbound (host
  // callers): a device sync, since created streams are not ordered with each other.
  void begin() {
    if (compute_ == nullptr) {
      CUDA_CHECK(cudaDeviceSynchronize());
      return;
    }
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

  MPI_Comm mpi_;
  bool owns_;
  int rank_ = 0;
  int size_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_ = nullptr;  // the ops' stream once bound
  cudaEvent_t forked_ = nullptr;    // compute -> NCCL
  cudaEvent_t joined_ = nullptr;    // NCCL -> compute
  std::vector<cudaEvent_t> done_;   // [request]: recorded behind each started all-reduce
  int next_request_ = 0;            // requests of the current step
  int waited_ = 0;
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm() {
  return std::make_unique<NcclComm>(MPI_COMM_WORLD, false);
}

std::unique_ptr<Comm> make_nccl_group_comm(int color) {
  // Collective (MPI, then NCCL's bootstrap within the group).
  return std::make_unique<NcclComm>(split_world(color), true);
}

}  // namespace mnist_ddp
