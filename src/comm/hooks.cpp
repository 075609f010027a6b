// hooks.cpp — the gradient hooks (plain average, fp16/bf16 casts, PowerSGD) and their table.
#include "mnist_ddp/comm/hooks.hpp"

#include <array>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

// PyTorch's default (allreduce_hook): sum over ranks, then divide by the world size, in the
// communicator's memory.
class PlainHook final : public GradientHook {
 public:
  explicit PlainHook(const HookContext& ctx) : bytes_(ctx.buckets.size(), 0) {}
  bool reduce_arena(Comm& comm, std::span<float> arena) override {
    // Collective: one all-reduce of the whole arena after backward (the comparison mode).
    comm.allreduce_avg(arena);
    arena_bytes_ = arena.size_bytes();
    return true;
  }
  int start(Comm& comm, std::size_t b, std::span<float> grads) override {
    bytes_[b] = grads.size_bytes();
    arena_bytes_ = 0;
    // Collective (non-blocking where the comm supports it): this bucket's gradients, summed over
    // ranks, while backward computes the earlier layers.
    return comm.start_allreduce_sum(grads);
  }
  void finish(Comm& comm, std::size_t, int request, std::span<float> grads) override {
    // Sum, then divide, in the communicator's memory (the host, or the GPU).
    comm.finish_allreduce_avg(request, grads);
  }
  std::uint64_t payload_bytes(std::size_t b) const override {
    return arena_bytes_ > 0 ? (b == 0 ? arena_bytes_ : 0) : bytes_[b];
  }

 private:
  std::vector<std::uint64_t> bytes_;
  std::uint64_t arena_bytes_ = 0;  // the last step reduced the arena at once
};

// PyTorch's fp16_compress_hook / bf16_compress_hook: each bucket cast to 16 bits and divided by
// the world size in 16 bits (Ops, in the gradients' memory), summed in 16 bits, decoded.
class HalfHook final : public GradientHook {
 public:
  HalfHook(const HookContext& ctx, DType type) : ops_(ctx.model.ops()), type_(type) {
    for (const Bucket& b : ctx.buckets) {
      encoded_.push_back(reinterpret_cast<std::uint16_t*>(
          ops_.alloc_bytes(b.count * sizeof(std::uint16_t))));  // [count] 16-bit encodings
      counts_.push_back(b.count);
    }
  }
  ~HalfHook() override {
    for (std::uint16_t* e : encoded_) ops_.free_bytes(reinterpret_cast<std::uint8_t*>(e));
  }
  HalfHook(const HalfHook&) = delete;
  HalfHook& operator=(const HalfHook&) = delete;
  int start(Comm& comm, std::size_t b, std::span<float> grads) override {
    ops_.encode_half(grads.size(), grads.data(), encoded_[b], type_,
                     static_cast<float>(comm.size()));
    // Collective (non-blocking; after the encode on the ops' stream where there is one): the
    // 16-bit encodings summed over ranks in 16 bits.
    return comm.start_allreduce_sum(std::span<std::uint16_t>(encoded_[b], counts_[b]), type_);
  }
  void finish(Comm& comm, std::size_t b, int request, std::span<float> grads) override {
    comm.wait(request);  // the compute stream (or host) now sees the sum
    ops_.decode_half(grads.size(), encoded_[b], grads.data(), type_);  // divided before the sum
  }
  std::uint64_t payload_bytes(std::size_t b) const override {
    return counts_[b] * sizeof(std::uint16_t);
  }

 private:
  Ops& ops_;
  DType type_;
  std::vector<std::uint16_t*> encoded_;  // per bucket, in backend memory, alive with the hook
  std::vector<std::size_t> counts_;
};

// PowerSGD (powersgd.hpp): after backward, bucket by bucket, in bucket order on every rank.
class PowerSgdHook final : public GradientHook {
 public:
  PowerSgdHook(const HookContext& ctx, Compression c) {
    MNIST_DDP_CHECK(ctx.model.ops().device() == Device::Cpu, "PowerSGD works on host memory only");
    // Each bucket's tensors with PyTorch's shapes: matrices rows = shape[0], cols = the rest.
    std::vector<std::vector<BucketTensor>> tensors(ctx.buckets.size());
    std::vector<std::size_t> sizes;
    for (std::size_t b = 0; b < ctx.buckets.size(); ++b) {
      const Bucket& bucket = ctx.buckets[b];
      sizes.push_back(bucket.count);
      for (const auto& e : ctx.model.param_entries()) {
        if (e.offset < bucket.offset || e.offset >= bucket.offset + bucket.count) continue;
        const bool matrix = e.shape.size() > 1;
        const std::size_t rows = matrix ? static_cast<std::size_t>(e.shape[0]) : 0;
        tensors[b].push_back(
            BucketTensor{e.offset - bucket.offset, rows, matrix ? e.numel / rows : e.numel});
      }
    }
    PowerSgdConfig cfg = ctx.powersgd;
    cfg.batched = c == Compression::BatchedPowerSgdFp16;
    cfg.fp16 = c != Compression::PowerSgd;
    powersgd_ = std::make_unique<PowerSgd>(ctx.comm, cfg, std::move(tensors), std::move(sizes));
    bytes_.assign(ctx.buckets.size(), 0);
  }
  bool overlaps() const override { return false; }
  int start(Comm&, std::size_t, std::span<float>) override { return -1; }  // all in finish()
  void finish(Comm&, std::size_t b, int, std::span<float> grads) override {
    // Collectives (inside): this bucket's PowerSGD all-reduces.
    powersgd_->reduce(b, grads);
    bytes_[b] = powersgd_->last_payload_bytes();
  }
  std::uint64_t payload_bytes(std::size_t b) const override { return bytes_[b]; }
  void end_step() override { powersgd_->next_iter(); }
  PowerSgd* powersgd() override { return powersgd_.get(); }

 private:
  std::unique_ptr<PowerSgd> powersgd_;
  std::vector<std::uint64_t> bytes_;
};

using HookFactory = std::unique_ptr<GradientHook> (*)(const HookContext&);
struct HookEntry {
  Compression compression;
  HookFactory make;
};
constexpr std::array<HookEntry, 6> kHooks{{
    {Compression::None,
     [](const HookContext& c) -> std::unique_ptr<GradientHook> {
       return std::make_unique<PlainHook>(c);
     }},
    {Compression::Fp16,
     [](const HookContext& c) -> std::unique_ptr<GradientHook> {
       return std::make_unique<HalfHook>(c, DType::F16);
     }},
    {Compression::Bf16,
     [](const HookContext& c) -> std::unique_ptr<GradientHook> {
       return std::make_unique<HalfHook>(c, DType::BF16);
     }},
    {Compression::PowerSgd,
     [](const HookContext& c) -> std::unique_ptr<GradientHook> {
       return std::make_unique<PowerSgdHook>(c, Compression::PowerSgd);
     }},
    {Compression::PowerSgdFp16,
     [](const HookContext& c) -> std::unique_ptr<GradientHook> {
       return std::make_unique<PowerSgdHook>(c, Compression::PowerSgdFp16);
     }},
    {Compression::BatchedPowerSgdFp16,
     [](const HookContext& c) -> std::unique_ptr<GradientHook> {
       return std::make_unique<PowerSgdHook>(c, Compression::BatchedPowerSgdFp16);
     }},
}};
static_assert(kHooks.size() == kCompressionNames.size(), "one hook per --compression value");

}  // namespace

std::unique_ptr<GradientHook> make_hook(Compression c, const HookContext& ctx) {
  for (const HookEntry& e : kHooks)
    if (e.compression == c) return e.make(ctx);
  fail_internal("no gradient hook for this --compression value", __FILE__, __LINE__);
}

std::uint64_t ring_wire_bytes(std::uint64_t payload, int ranks) {
  const double r = ranks;
  return static_cast<std::uint64_t>(2.0 * (r - 1) / r * static_cast<double>(payload));
}

}  // namespace mnist_ddp
