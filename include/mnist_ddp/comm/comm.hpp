// comm.hpp — the collective-communication interface the trainer and the DDP engine talk to.
// Typed std::span API so counts and dtypes cannot disagree. MpiComm works on host memory; the
// CUDA backend adds NcclComm behind the same interface.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mnist_ddp/base/dtype.hpp"
#include "mnist_ddp/comm/flight_recorder.hpp"

namespace mnist_ddp {

class CollectiveWatchdog;
class FlightRing;

enum class ReduceOp { Sum, Max, Min };

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In-place all-reduce.
  void allreduce(std::span<float> data, ReduceOp op);
  void allreduce(std::span<double> data, ReduceOp op);
  void allreduce(std::span<std::int32_t> data, ReduceOp op);
  void allreduce(std::span<std::int64_t> data, ReduceOp op);
  // Sum over ranks, then divide by the world size (DDP gradient averaging). Virtual because the
  // division must run where the data lives (NCCL: on the device).
  virtual void allreduce_avg(std::span<float> data);

  void broadcast(std::span<float> data, int root);
  void broadcast(std::span<std::int64_t> data, int root);
  void broadcast(std::span<std::uint64_t> data, int root);

  // recv.size() == send.size() * size(); rank r's block lands at recv[r * send.size()].
  void allgather(std::span<const std::uint64_t> send, std::span<std::uint64_t> recv);
  void allgather(std::span<const float> send, std::span<float> recv);
  void allgather(std::span<const double> send, std::span<double> recv);

  // Non-blocking sum all-reduce (in place): start, then test (progress; true when done) or wait.
  // Communicators progress it their own way: MpiComm with MPI_Iallreduce advanced by test()
  // calls from backward, NcclComm on its stream, the communication-thread wrapper on its thread;
  // the base class completes it at once (blocking).
  int start_allreduce_sum(std::span<float> data);
  // The same on 16-bit floats (type F16 or BF16), summed in that format (NCCL's fp16/bf16 sum;
  // over MPI, which has no 16-bit float type, a user-defined reduction): the fp16/bf16 hooks.
  int start_allreduce_sum(std::span<std::uint16_t> data, DType type);
  virtual bool test(int request);
  virtual void wait(int request);
  // Completes a start_allreduce_sum of `data` and divides it by the world size (sum, then
  // divide), in the communicator's memory. The base class waits, then divides on the host;
  // NcclComm joins the compute stream to the all-reduce by an event and divides on the device.
  virtual void finish_allreduce_avg(int request, std::span<float> data);
  // Unwinding (an exception between a sum's start and its wait): the buffers of the sums started
  // this step are about to be freed. A communicator that works on them from elsewhere stops doing
  // so before returning (the communication thread drops what it has not begun and finishes the
  // sum it is in). Default: nothing (a pending MPI request is ended by the abort that follows).
  virtual void abandon_step() {}

  // Orders this communicator's device work with a compute stream (a cudaStream_t, Ops::stream()):
  // each collective waits for the work queued there and that stream waits for the collective, by
  // events and without a host sync, so a step and its collectives can be captured in one CUDA
  // graph. A no-op for communicators on host memory.
  virtual void bind_stream(void* stream);
  // True when a step using this communicator can be captured in a CUDA graph.
  virtual bool capturable() const;
  // True when this communicator's collectives take device memory (NCCL, host-staged MPI): the
  // GPU's gradients go through a device-memory Reducer exactly when this holds, whether or not a
  // step can be captured.
  virtual bool device_memory() const;
  // What carries the collectives, for logs: "MPI", "NCCL stream", "host-staged MPI".
  virtual const char* transport() const;
  // The stream this communicator's collectives run on (a cudaStream_t: NCCL's), where the
  // timeline stamps the end of an all-reduce; nullptr when they run on the host.
  virtual void* collective_stream() const;

  // Where this communicator's host-side bookkeeping stands (bytes, collective sequence, open
  // watchdog entries, requests of the current step). A CUDA graph capture that fails part-way has
  // registered collectives that never ran; rewind(mark) taken before the capture forgets them, so
  // the eager rerun of the step issues the same sequence on every rank.
  struct Mark {
    std::uint64_t payload_bytes = 0;
    std::uint64_t collectives = 0;
  };
  Mark mark() const { return Mark{payload_bytes_, collectives_}; }
  void rewind(const Mark& m);

  virtual void barrier() = 0;
  // Ends every rank of the job now (internal failures only).
  [[noreturn]] virtual void abort(int code) = 0;

  // Payload bytes this rank has handed to collectives (sum of buffer sizes), for the metrics.
  std::uint64_t payload_bytes() const { return payload_bytes_; }

  // Every collective registers with the watchdog (watchdog.hpp; nullptr: none). With
  // debug_collectives, before each collective every rank all-gathers its fingerprint (this
  // communicator's sequence number, op, count, dtype); any difference throws UserError on every
  // rank naming rank 0's (expected) and the first differing rank's (actual) collective.
  void set_watchdog(CollectiveWatchdog* w) { watchdog_ = w; }
  void set_debug_collectives(bool on) { debug_collectives_ = on; }
  // Every collective also goes into this ring (flight_recorder.hpp; nullptr: none).
  void set_flight_ring(FlightRing* ring) { flight_ = ring; }

 protected:
  // Around a collective (the typed front does it; subclasses for their non-blocking starts):
  // the flight recorder's entry, the fingerprint check, then the watchdog's registration; returns
  // the collective's number on this communicator. watch_end when the host is done with it:
  // completed on this rank, or handed to a device stream (done_state()). seq 0: nothing.
  std::uint64_t watch_begin(const char* op, std::size_t count, DType type);
  void watch_end(std::uint64_t seq);
  // What watch_end records: Completed (host collectives) or Enqueued (NCCL joined to a stream).
  virtual FlightState done_state() const { return FlightState::Completed; }
  // The fingerprint exchange: 5 x uint64 per rank, host memory, recv in rank order. Default:
  // allgather_raw (communicators on host memory).
  virtual void fingerprint_allgather(const std::uint64_t* send, std::uint64_t* recv);
  virtual void allreduce_raw(void* data, std::size_t count, DType type, ReduceOp op) = 0;
  virtual void broadcast_raw(void* data, std::size_t count, DType type, int root) = 0;
  virtual void allgather_raw(const void* send, void* recv, std::size_t count, DType type) = 0;
  // The non-blocking sum behind start_allreduce_sum (bytes already counted); returns the request
  // (negative: already complete). Default: the blocking allreduce_raw, watched.
  virtual int start_allreduce_raw(void* data, std::size_t count, DType type);
  void count_bytes(std::size_t bytes) { payload_bytes_ += bytes; }
  // rewind()'s part for a subclass's own per-step state (NcclComm: its request counters).
  virtual void rewind_step() {}

 private:
  std::uint64_t payload_bytes_ = 0;
  CollectiveWatchdog* watchdog_ = nullptr;
  bool debug_collectives_ = false;
  std::uint64_t collectives_ = 0;  // issued on this communicator (the fingerprint's sequence)
  FlightRing* flight_ = nullptr;
  struct OpenWatch {
    std::uint64_t seq;       // this communicator's
    std::uint64_t watchdog;  // the watchdog's
  };
  std::vector<OpenWatch> open_watches_;  // watchdog entries begun and not yet ended
};

// Host-memory collectives over MPI_COMM_WORLD.
std::unique_ptr<Comm> make_mpi_comm();
// Host-memory collectives among the ranks that pass the same color (MPI_Comm_split; e.g. the node
// index for post-local SGD's node-local groups). Collective over the whole job.
std::unique_ptr<Comm> make_mpi_group_comm(int color);
// Device-memory collectives over NCCL on their own CUDA stream, bootstrapped from MPI: rank 0
// calls ncclGetUniqueId, MPI_Bcast hands it to every rank, each calls ncclCommInitRank. Call
// after the GPU is selected. A "built without CUDA" UserError in a CPU-only build.
std::unique_ptr<Comm> make_nccl_comm();
// NCCL over the ranks that pass the same color (world order kept), bootstrapped over that MPI
// group (post-local SGD's node-local groups on a GPU). Collective over the world.
std::unique_ptr<Comm> make_nccl_group_comm(int color);
// MPI collectives on device memory, staged through host buffers (--comm mpi on a GPU: lets
// several ranks share one GPU). "Built without CUDA" in a CPU-only build.
std::unique_ptr<Comm> make_host_staged_comm();
// The same over the ranks that pass the same color (collective over the world; a rank's own
// color makes a world of one, as tests need).
std::unique_ptr<Comm> make_host_staged_group_comm(int color);

}  // namespace mnist_ddp
