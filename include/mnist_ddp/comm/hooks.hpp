// hooks.hpp — DDP communication hooks as strategies: how one bucket's gradients become their
// average over the ranks (PyTorch's register_comm_hook). One table maps each --compression value
// to its hook; the Reducer only schedules buckets and never branches on the hook. The casts run
// in Ops, so one hook serves host and device memory alike.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/compress.hpp"
#include "mnist_ddp/comm/powersgd.hpp"
#include "mnist_ddp/model/model.hpp"

namespace mnist_ddp {

struct Bucket {
  std::size_t offset = 0;  // into the gradient arena (elements)
  std::size_t count = 0;
  std::vector<int> layers;  // model layers whose gradients it holds (reverse order)
};

class GradientHook {
 public:
  virtual ~GradientHook() = default;
  // Whether a bucket may start while backward still runs (PowerSGD: no, its all-reduces depend
  // on each other and run after backward, bucket by bucket).
  virtual bool overlaps() const { return true; }
  // --no-overlap: reduce the whole arena at once if this hook has such a mode (the plain hook:
  // one all-reduce, the comparison mode); false: the Reducer starts every bucket after backward.
  virtual bool reduce_arena(Comm& comm, std::span<float> arena) { return false; }
  // Starts bucket b's reduction over comm (grads: its view of the arena); returns the request
  // finish() completes.
  virtual int start(Comm& comm, std::size_t b, std::span<float> grads) = 0;
  // Completes it: grads hold the average over comm's ranks.
  virtual void finish(Comm& comm, std::size_t b, int request, std::span<float> grads) = 0;
  // Bytes bucket b handed to collectives in its last reduction.
  virtual std::uint64_t payload_bytes(std::size_t b) const = 0;
  // After every bucket of a step has finished.
  virtual void end_step() {}
  // The PowerSGD state (error feedback, Qs, iteration) for checkpoints; nullptr for the others.
  virtual PowerSgd* powersgd() { return nullptr; }
};

// What a hook is built from: the buckets, the model (its Ops hold the 16-bit encodings in the
// gradients' memory; PowerSGD reads its tensor shapes), the group PowerSGD keeps, its settings.
struct HookContext {
  const std::vector<Bucket>& buckets;
  ConvNet& model;
  Comm& comm;
  PowerSgdConfig powersgd;
};

// The hook `c` names, from the table (every Compression has exactly one entry).
std::unique_ptr<GradientHook> make_hook(Compression c, const HookContext& ctx);

// Bytes a ring all-reduce sends per rank for `payload` bytes over `ranks`: 2 (R-1)/R x payload.
std::uint64_t ring_wire_bytes(std::uint64_t payload, int ranks);

}  // namespace mnist_ddp
