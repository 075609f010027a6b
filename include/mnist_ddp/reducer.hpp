// reducer.hpp — DDP's gradient reducer: buckets are views of the flat gradient arena in reverse
// layer order (fc, layer2, layer1), filled up to --bucket-cap-kb; a bucket's all-reduce starts the
// moment backward has produced all of its gradients and is progressed while backward goes on; the
// step then waits only for what is still in flight. --no-overlap keeps one all-reduce of the whole
// arena after backward. Either way: sum over ranks, then divide by the world size.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mnist_ddp/comm.hpp"
#include "mnist_ddp/compress.hpp"
#include "mnist_ddp/model.hpp"
#include "mnist_ddp/powersgd.hpp"

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

class Reducer {
 public:
  // compression fp16/bf16: each bucket is cast to 16 bits, divided by the world size, summed in
  // 16 bits and decoded (PyTorch's fp16/bf16 compress hooks); none: sum, then divide; PowerSGD:
  // after backward, bucket by bucket (its two dependent all-reduces per bucket are not
  // overlapped), with `powersgd` (rank, start iteration, ...; batched/fp16 follow compression).
  Reducer(Comm& comm, ConvNet& model, std::size_t cap_bytes, bool overlap,
          Compression compression = Compression::None, PowerSgdConfig powersgd = {});
  // Backward's "layer ready" callback: launches every bucket whose layers are all ready and
  // progresses those in flight.
  void layer_ready(int layer);
  // After backward: waits for what is in flight (or, without overlap, reduces everything now),
  // then divides by the world size. Gradients are identical on every rank afterwards.
  void finish();
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Launch order of the last step (bucket indices), for tests.
  const std::vector<int>& launch_order() const { return launch_order_; }
  ReducerStats take_stats();
  // The PowerSGD state (error feedback, Qs, step counter), or nullptr for the other hooks.
  PowerSgd* powersgd() { return powersgd_.get(); }

 private:
  void launch(std::size_t b);
  Comm& comm_;
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
  ReducerStats stats_;
  std::unique_ptr<PowerSgd> powersgd_;
};

}  // namespace mnist_ddp
