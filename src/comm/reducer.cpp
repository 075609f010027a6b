// reducer.cpp — bucketed, overlapped gradient averaging: the schedule (which bucket starts when,
// what is waited for); the hooks do the reducing.
#include "mnist_ddp/comm/reducer.hpp"

#include <algorithm>
#include <chrono>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {
// The timeline's span names per bucket (a bucket holds at least one of the 3 layers).
constexpr std::array<const char*, 3> kBucketSpans = {"allreduce bucket 0", "allreduce bucket 1",
                                                     "allreduce bucket 2"};
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::vector<Bucket> make_buckets(const ConvNet& model, std::size_t cap_bytes) {
  std::vector<Bucket> out;
  for (int layer = ConvNet::kLayers - 1; layer >= 0; --layer) {
    const auto [offset, count] = model.layer_range(layer);
    const std::size_t bytes = count * sizeof(float);
    // Layers are contiguous in the arena and visited in reverse, so a bucket grows downwards.
    if (!out.empty() && (out.back().count * sizeof(float) + bytes) <= cap_bytes) {
      out.back().offset = offset;
      out.back().count += count;
      out.back().layers.push_back(layer);
    } else {
      out.push_back(Bucket{offset, count, {layer}});
    }
  }
  return out;
}

Reducer::Reducer(Comm& comm, ConvNet& model, std::size_t cap_bytes, bool overlap,
                 Compression compression, PowerSgdConfig powersgd)
    : comm_(&comm),
      hook_comm_(&comm),
      model_(model),
      overlap_(overlap),
      buckets_(make_buckets(model, cap_bytes)),
      hook_(make_hook(compression, HookContext{buckets_, model, comm, powersgd})),
      hook_name_(name_in(kCompressionNames, compression)) {
  request_.assign(buckets_.size(), -1);
  span_.assign(buckets_.size(), -1);
  started_at_.assign(buckets_.size(), 0);
  reset_buckets();
}

Reducer::~Reducer() {
  // Buckets started and never finished: an exception left the step. Their sums may still be
  // working on the gradients and the hook's buffers, which are freed after this.
  if (std::find(started_.begin(), started_.end(), true) != started_.end()) comm_->abandon_step();
}

std::span<float> Reducer::grads_of(std::size_t b) {
  return model_.grads().subspan(buckets_[b].offset, buckets_[b].count);
}

void Reducer::reset_buckets() {
  ready_.resize(buckets_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    ready_[b] = static_cast<int>(buckets_[b].layers.size());
  started_.assign(buckets_.size(), false);
  done_.assign(buckets_.size(), false);
}

void Reducer::launch(std::size_t b) {
  started_at_[b] = now();
  started_[b] = true;
  if (tracer_ != nullptr) {
    span_[b] =
        tracer_->open(kBucketSpans[std::min<std::size_t>(b, kBucketSpans.size() - 1)], Track::Comm,
                      SpanArgs{.bucket = static_cast<int>(b), .hook = hook_name_});
  }
  request_[b] = hook_->start(*comm_, b, grads_of(b));
  if (tracer_ != nullptr) {
    tracer_->set_bytes(span_[b], static_cast<std::int64_t>(hook_->payload_bytes(b)));
    if (void* stream = comm_->collective_stream()) {
      // A GPU communicator: the all-reduce just enqueued on its stream ends the span there when
      // it completes (the host only sees it once the compute stream has waited for it).
      tracer_->close_on(span_[b], stream);
      span_[b] = -1;
    }
  }
  launch_order_.push_back(static_cast<int>(b));
}

void Reducer::completed(std::size_t b) {
  if (tracer_ != nullptr) tracer_->close(span_[b], Track::Comm);
  span_[b] = -1;
}

void Reducer::layer_ready(int layer) {
  if (!overlap_ || !hook_->overlaps()) return;
  if (launch_order_.size() == buckets_.size()) launch_order_.clear();  // a new step
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const auto& ls = buckets_[b].layers;
    if (std::find(ls.begin(), ls.end(), layer) != ls.end() && --ready_[b] == 0) launch(b);
  }
  // Progress what is in flight (MPI moves non-blocking collectives only inside MPI calls).
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (started_[b] && !done_[b] && comm_->test(request_[b])) {
      done_[b] = true;
      stats_.comm_seconds += now() - started_at_[b];
      completed(b);
    }
  }
}

void Reducer::finish() {
  const double t0 = now();
  std::uint64_t payload = 0;
  const int arena_span =
      tracer_ != nullptr && !overlap_
          ? tracer_->open("allreduce all gradients", Track::Comm, SpanArgs{.hook = hook_name_})
          : -1;
  const bool whole_arena = !overlap_ && hook_->reduce_arena(*comm_, model_.grads());
  if (tracer_ != nullptr && !overlap_) {
    // Without overlap, one span around the whole reduction (the arena at once, or the buckets
    // one after the other, each its own span inside it).
    tracer_->set_bytes(arena_span, static_cast<std::int64_t>(model_.grads().size_bytes()));
    if (whole_arena) tracer_->close(arena_span, Track::Comm);
  }
  if (whole_arena) {
    launch_order_.clear();
    payload = hook_->payload_bytes(0);
    stats_.comm_seconds += now() - t0;
  } else {
    if (!overlap_ || !hook_->overlaps()) {
      // Nothing started during backward: every bucket now, one after the other.
      launch_order_.clear();
      for (std::size_t b = 0; b < buckets_.size(); ++b) launch(b);
    }
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      MNIST_DDP_CHECK(started_[b], "a bucket's gradients were never reported ready");
      hook_->finish(*comm_, b, request_[b], grads_of(b));
      if (!done_[b]) {
        stats_.comm_seconds += now() - started_at_[b];
        completed(b);
      }
      payload += hook_->payload_bytes(b);
    }
    hook_->end_step();
    if (tracer_ != nullptr && !overlap_) tracer_->close(arena_span, Track::Comm);
  }
  stats_.exposed_seconds += now() - t0;
  last_payload_ = payload;
  last_wire_ = ring_wire_bytes(payload, comm_->size());
  reset_buckets();
}

void Reducer::count_step() {
  stats_.payload_bytes += last_payload_;
  stats_.wire_bytes += last_wire_;
  ++stats_.steps;
}

void Reducer::rewind(const Mark& m) {
  MNIST_DDP_CHECK(hook_->powersgd() == nullptr, "only the device-memory reducer can forget a step");
  stats_ = m.stats;
  launch_order_.clear();
  reset_buckets();
}

void Reducer::use_comm(Comm& comm) {
  MNIST_DDP_CHECK(hook_->powersgd() == nullptr || &comm == hook_comm_, "PowerSGD keeps its group");
  comm_ = &comm;
}

ReducerStats Reducer::take_stats() {
  const ReducerStats s = stats_;
  stats_ = {};
  return s;
}

}  // namespace mnist_ddp
