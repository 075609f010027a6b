// reducer.hpp — DDP's gradient reducer: buckets are views of the flat gradient arena in reverse
// layer order (fc, layer2, layer1), filled up to --bucket-cap-kb; a bucket's all-reduce starts the
// moment backward has produced all of its gradients and is progressed while backward goes on; the
// step then waits only for what is still in flight. --no-overlap keeps one all-reduce of the whole
// arena after backward. Either way: sum over ranks, then divide by the world size.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "mnist_ddp/dist/comm.hpp"
#include "mnist_ddp/dist/compress.hpp"
#include "mnist_ddp/dist/powersgd.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/runtime/enum_names.hpp"

namespace mnist_ddp {

struct Bucket {
  std::size_t offset = 0;  // into the gradient arena (elements)
  std::size_t count = 0;
  std::vector<int> layers;  // model layers whose gradients it holds (reverse order)
};

// Reverse-layer-order buckets of at most cap_bytes (a single layer larger than the cap gets a
// bucket of its own). Pure, so the layout is unit-tested.
std::vector<Bucket> make_buckets(const ConvNet& model, std::size_t cap_bytes);

struct ReducerStats {
  double comm_seconds = 0;          // from each bucket's start to its observed completion, summed
  double exposed_seconds = 0;       // time the step spent waiting after backward (not hidden)
  std::uint64_t wire_bytes = 0;     // estimate of bytes sent per rank (ring: 2 (R-1)/R x payload)
  std::uint64_t payload_bytes = 0;  // bytes this rank handed to gradient collectives
  std::int64_t steps = 0;
};

// How a bucket's all-reduce progresses while backward runs (CPU): Test: a non-blocking
// MPI_Iallreduce that MPI advances inside the MPI_Test calls made from backward's layer-ready
// callbacks; Thread: a communication thread runs a blocking all-reduce per bucket on its own
// communicator (needs MPI_THREAD_MULTIPLE).
enum class OverlapEngine { Test, Thread };
inline constexpr std::array<NameOf<OverlapEngine>, 2> kOverlapEngineNames{
    {{OverlapEngine::Test, "test"}, {OverlapEngine::Thread, "thread"}}};

class Reducer {
 public:
  // compression fp16/bf16: each bucket is cast to 16 bits, divided by the world size, summed in
  // 16 bits and decoded (PyTorch's fp16/bf16 compress hooks); none: sum, then divide; PowerSGD:
  // after backward, bucket by bucket (its two dependent all-reduces per bucket are not
  // overlapped), with `powersgd` (rank, start iteration, ...; batched/fp16 follow compression).
  // thread_comm: the communication thread's communicator (OverlapEngine::Thread), the same ranks
  // as comm; it is used only by that thread. device_memory: the gradients live on a GPU and comm
  // works there (NcclComm): the fp16/bf16 hooks are encoded, summed and decoded by the
  // communicator on the device (Comm::start_allreduce_avg16); PowerSGD and the thread engine are
  // host-only.
  Reducer(Comm& comm, ConvNet& model, std::size_t cap_bytes, bool overlap,
          Compression compression = Compression::None, PowerSgdConfig powersgd = {},
          OverlapEngine engine = OverlapEngine::Test, Comm* thread_comm = nullptr,
          bool device_memory = false);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;
  // Backward's "layer ready" callback: launches every bucket whose layers are all ready and
  // progresses those in flight.
  void layer_ready(int layer);
  // After backward: waits for what is in flight (or, without overlap, reduces everything now),
  // then divides by the world size. Gradients are identical on every rank afterwards.
  void finish();
  // A CUDA graph replayed a captured step: count the bytes that step's all-reduces moved.
  void note_replayed_step();
  // The bookkeeping before a step (statistics and byte marks). rewind(mark) forgets a step that
  // never ran (a CUDA graph capture that failed part-way): statistics back to the mark, no bucket
  // started or ready, so the eager rerun starts clean. Device-memory/blocking paths only (a
  // started host MPI request cannot be taken back).
  struct Mark {
    ReducerStats stats;
    std::uint64_t payload_mark = 0, wire_mark = 0, last_payload = 0, last_wire = 0;
  };
  Mark mark() const;
  void rewind(const Mark& m);
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // The group the gradients are averaged over from the next step on (post-local SGD switches to
  // the node-local group). Between steps only; not with PowerSGD (its state is per group).
  void use_comm(Comm& comm);
  // Launch order of the last step (bucket indices), for tests.
  const std::vector<int>& launch_order() const { return launch_order_; }
  ReducerStats take_stats();
  // The PowerSGD state (error feedback, Qs, step counter), or nullptr for the other hooks.
  PowerSgd* powersgd() { return powersgd_.get(); }

 private:
  void launch(std::size_t b);
  void finish_step();                         // finish() without the per-step byte bookkeeping
  void worker();                              // the communication thread's loop
  void reduce_on_thread_comm(std::size_t b);  // one bucket's blocking all-reduce
  Comm* comm_;
  ConvNet& model_;
  bool overlap_;
  Compression compression_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<std::uint16_t>> encoded_;  // per bucket, alive until its reduce ends
  std::vector<int> ready_;                           // per bucket: layers still missing this step
  std::vector<int> request_;                         // per bucket: comm request, -2 = not started
  std::vector<double> started_;
  std::vector<bool> done_;
  std::vector<int> launch_order_;
  // Bytes of the last step (for note_replayed_step) and the totals when it began.
  std::uint64_t payload_mark_ = 0, wire_mark_ = 0, last_payload_ = 0, last_wire_ = 0;
  ReducerStats stats_;
  std::unique_ptr<PowerSgd> powersgd_;
  // OverlapEngine::Thread: buckets queued by launch(), reduced by worker_, finished_ set by it.
  OverlapEngine engine_;
  Comm* thread_comm_;
  bool device_memory_ = false;  // gradients and comm on a GPU (hooks encoded there)
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::size_t> queue_;
  std::vector<double> finished_at_;  // per bucket; < 0: not finished this step
  bool stop_ = false;
  std::thread worker_;  // last: started once everything above exists
};

}  // namespace mnist_ddp
