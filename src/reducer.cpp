// reducer.cpp — bucketed, overlapped gradient averaging.
#include "mnist_ddp/reducer.hpp"

#include <algorithm>
#include <chrono>

#include "mnist_ddp/check.hpp"

namespace mnist_ddp {
namespace {
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

Reducer::Reducer(Comm& comm, ConvNet& model, std::size_t cap_bytes, bool overlap)
    : comm_(comm), model_(model), overlap_(overlap), buckets_(make_buckets(model, cap_bytes)) {
  ready_.assign(buckets_.size(), 0);
  request_.assign(buckets_.size(), -2);
  started_.assign(buckets_.size(), 0);
  done_.assign(buckets_.size(), false);
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    ready_[b] = static_cast<int>(buckets_[b].layers.size());
}

void Reducer::launch(std::size_t b) {
  auto grads = model_.grads().subspan(buckets_[b].offset, buckets_[b].count);
  started_[b] = now();
  // Collective (non-blocking where the comm supports it): this bucket's gradients, summed over
  // ranks, while backward computes the earlier layers.
  request_[b] = comm_.start_allreduce_sum(grads);
  launch_order_.push_back(static_cast<int>(b));
  const double r = comm_.size();
  stats_.wire_bytes += static_cast<std::uint64_t>(2.0 * (r - 1) / r * grads.size_bytes());
}

void Reducer::layer_ready(int layer) {
  if (!overlap_) return;
  if (launch_order_.size() == buckets_.size()) launch_order_.clear();  // a new step
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const auto& ls = buckets_[b].layers;
    if (std::find(ls.begin(), ls.end(), layer) != ls.end() && --ready_[b] == 0) launch(b);
  }
  // Progress what is in flight (MPI moves non-blocking collectives only inside MPI calls).
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (request_[b] != -2 && !done_[b] && comm_.test(request_[b])) {
      done_[b] = true;
      stats_.comm_seconds += now() - started_[b];
    }
  }
}

void Reducer::finish() {
  const double t0 = now();
  if (!overlap_) {
    launch_order_.clear();
    // Collective: one all-reduce of the whole arena after backward (the comparison mode).
    const auto g = model_.grads();
    const double r = comm_.size();
    stats_.wire_bytes += static_cast<std::uint64_t>(2.0 * (r - 1) / r * g.size_bytes());
    comm_.allreduce_avg(g);
    const double t = now() - t0;
    stats_.comm_seconds += t;
    stats_.exposed_seconds += t;
    return;
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    MNIST_DDP_CHECK(request_[b] != -2, "a bucket's gradients were never reported ready");
    if (!done_[b]) {
      comm_.wait(request_[b]);
      stats_.comm_seconds += now() - started_[b];
    } else {
      comm_.wait(request_[b]);  // releases the request
    }
    // Sum, then divide (bit-identical to allreduce_avg on the whole arena).
    const float n = static_cast<float>(comm_.size());
    for (float& x : model_.grads().subspan(buckets_[b].offset, buckets_[b].count)) x /= n;
  }
  stats_.exposed_seconds += now() - t0;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    ready_[b] = static_cast<int>(buckets_[b].layers.size());
    request_[b] = -2;
    done_[b] = false;
  }
}

ReducerStats Reducer::take_stats() {
  const ReducerStats s = stats_;
  stats_ = {};
  return s;
}

}  // namespace mnist_ddp
