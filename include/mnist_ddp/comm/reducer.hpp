// reducer.hpp — DDP's gradient reducer: buckets are views of the flat gradient arena in reverse
// layer order (fc, layer2, layer1), filled up to --bucket-cap-kb; a bucket's reduction starts the
// moment backward has produced all of its gradients and is progressed while backward goes on; the
// step then waits only for what is still in flight. --no-overlap reduces after backward. How a
// bucket is reduced is its hook's business (hooks.hpp); how it progresses, its communicator's
// (MPI_Test from backward, NCCL's stream, or the communication thread: threaded_comm.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mnist_ddp/base/choices.hpp"
#include "mnist_ddp/base/enum_names.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/compress.hpp"
#include "mnist_ddp/comm/hooks.hpp"
#include "mnist_ddp/comm/powersgd.hpp"
#include "mnist_ddp/model/model.hpp"

namespace mnist_ddp {

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

class Reducer {
 public:
  // comm: where the buckets are reduced (the model communicator, or the communication thread's
  // wrapper); compression picks the hook (hooks.hpp) and powersgd its settings (PowerSGD keeps
  // comm's group). The hooks' buffers live in the model's Ops memory.
  Reducer(Comm& comm, ConvNet& model, std::size_t cap_bytes, bool overlap,
          Compression compression = Compression::None, PowerSgdConfig powersgd = {});
  // Unwinding mid-step: no communicator keeps working on the buckets' buffers after this.
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;
  // Backward's "layer ready" callback: launches every bucket whose layers are all ready and
  // progresses those in flight.
  void layer_ready(int layer);
  // After backward: waits for what is in flight (or, without overlap, reduces everything now);
  // gradients are the average over the ranks, identical on every rank afterwards.
  void finish();
  // The host-side accounting of one step (its bytes into the statistics), once per step however
  // the step ran: a CUDA graph replay runs none of the code above, so the trainer calls this
  // after every step and the figures are those of the step last run on the host.
  void count_step();
  // The bookkeeping before a step. rewind(mark) forgets a step that never ran (a CUDA graph
  // capture that failed part-way): timings back to the mark, no bucket started or ready, so the
  // eager rerun starts clean. Device-memory/blocking paths only (a started host MPI request
  // cannot be taken back).
  struct Mark {
    ReducerStats stats;
  };
  Mark mark() const { return Mark{stats_}; }
  void rewind(const Mark& m);
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // The group the gradients are averaged over from the next step on (post-local SGD switches to
  // the node-local group). Between steps only; not with PowerSGD (its state is per group).
  void use_comm(Comm& comm);
  // Launch order of the last step (bucket indices), for tests.
  const std::vector<int>& launch_order() const { return launch_order_; }
  ReducerStats take_stats();
  // The timeline (trace.hpp): each bucket's reduction, launch to observed completion, becomes a
  // communication span (bucket, bytes, hook); nullptr: none.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }
  // The PowerSGD state (error feedback, Qs, step counter), or nullptr for the other hooks.
  PowerSgd* powersgd() { return hook_->powersgd(); }

 private:
  void launch(std::size_t b);
  // Bucket b's reduction was seen complete: its span ends.
  void completed(std::size_t b);
  std::span<float> grads_of(std::size_t b);
  void reset_buckets();
  Comm* comm_;
  Comm* hook_comm_;  // the group the hook was built over (PowerSGD keeps it)
  ConvNet& model_;
  bool overlap_;
  std::vector<Bucket> buckets_;
  std::unique_ptr<GradientHook> hook_;
  std::vector<int> ready_;    // per bucket: layers still missing this step
  std::vector<int> request_;  // per bucket: the hook's request
  std::vector<bool> started_, done_;
  std::vector<double> started_at_;
  std::vector<int> span_;  // per bucket: its open timeline span
  Tracer* tracer_ = nullptr;
  const char* hook_name_;
  std::vector<int> launch_order_;
  std::uint64_t last_payload_ = 0, last_wire_ = 0;  // the step last run on the host
  ReducerStats stats_;
};

}  // namespace mnist_ddp
