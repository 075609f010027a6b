// reducer.cpp — bucketed, overlapped gradient averaging.
#include "mnist_ddp/dist/reducer.hpp"

#include <algorithm>
#include <chrono>

#include "mnist_ddp/runtime/check.hpp"

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

Reducer::Reducer(Comm& comm, ConvNet& model, std::size_t cap_bytes, bool overlap,
                 Compression compression, PowerSgdConfig powersgd, OverlapEngine engine,
                 Comm* thread_comm, bool device_memory)
    : comm_(&comm),
      model_(model),
      overlap_(overlap),
      compression_(compression),
      buckets_(make_buckets(model, cap_bytes)),
      engine_(engine),
      thread_comm_(thread_comm),
      device_memory_(device_memory) {
  MNIST_DDP_CHECK(!device_memory || (!is_powersgd(compression) && engine == OverlapEngine::Test),
                  "PowerSGD and the communication thread work on host memory only");
  finished_at_.assign(buckets_.size(), -1.0);
  if (engine_ == OverlapEngine::Thread && overlap_ && !is_powersgd(compression)) {
    MNIST_DDP_CHECK(thread_comm_ != nullptr && thread_comm_->size() == comm.size(),
                    "the communication thread needs its own communicator over the same ranks");
    worker_ = std::thread([this] { worker(); });
  }
  if (is_powersgd(compression)) {
    // Each bucket's tensors with PyTorch's shapes: matrices rows = shape[0], cols = the rest.
    std::vector<std::vector<BucketTensor>> tensors(buckets_.size());
    std::vector<std::size_t> sizes;
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      sizes.push_back(buckets_[b].count);
      for (const auto& e : model.param_entries()) {
        if (e.offset < buckets_[b].offset || e.offset >= buckets_[b].offset + buckets_[b].count)
          continue;
        const bool matrix = e.shape.size() > 1;
        const std::size_t rows = matrix ? static_cast<std::size_t>(e.shape[0]) : 0;
        tensors[b].push_back(
            BucketTensor{e.offset - buckets_[b].offset, rows, matrix ? e.numel / rows : e.numel});
      }
    }
    powersgd.batched = compression == Compression::BatchedPowerSgdFp16;
    powersgd.fp16 = compression != Compression::PowerSgd;
    powersgd_ = std::make_unique<PowerSgd>(comm, powersgd, std::move(tensors), std::move(sizes));
  }
  encoded_.resize(buckets_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b) encoded_[b].resize(buckets_[b].count);
  ready_.assign(buckets_.size(), 0);
  request_.assign(buckets_.size(), -2);
  started_.assign(buckets_.size(), 0);
  done_.assign(buckets_.size(), false);
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    ready_[b] = static_cast<int>(buckets_[b].layers.size());
}

Reducer::~Reducer() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
}

void Reducer::worker() {
  for (;;) {
    std::size_t b = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      b = queue_.front();
      queue_.pop_front();
    }
    reduce_on_thread_comm(b);
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_at_[b] = now();
    }
    cv_.notify_all();
  }
}

void Reducer::reduce_on_thread_comm(std::size_t b) {
  auto grads = model_.grads().subspan(buckets_[b].offset, buckets_[b].count);
  if (compression_ == Compression::None) {
    // Collective (communication thread, its own communicator): this bucket's sum.
    thread_comm_->allreduce(grads, ReduceOp::Sum);
  } else {
    // Collective (communication thread): the 16-bit sum of the encoding launch() prepared.
    thread_comm_->wait(
        thread_comm_->start_allreduce_sum16(encoded_[b], compression_ == Compression::Bf16));
  }
}

void Reducer::launch(std::size_t b) {
  auto grads = model_.grads().subspan(buckets_[b].offset, buckets_[b].count);
  started_[b] = now();
  const double r = comm_->size();
  if (worker_.joinable()) {
    if (compression_ != Compression::None) {
      encode16(grads, encoded_[b], compression_);
      const bool bf16 = compression_ == Compression::Bf16;
      for (auto& h : encoded_[b]) {
        h = bf16 ? to_bf16(from_bf16(h) / static_cast<float>(r))
                 : to_fp16(from_fp16(h) / static_cast<float>(r));
      }
    }
    const std::size_t bytes = compression_ == Compression::None
                                  ? grads.size_bytes()
                                  : encoded_[b].size() * sizeof(std::uint16_t);
    stats_.payload_bytes += bytes;
    stats_.wire_bytes += static_cast<std::uint64_t>(2.0 * (r - 1) / r * bytes);
    request_[b] = -1;  // owned by the thread
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(b);
    }
    cv_.notify_all();
    launch_order_.push_back(static_cast<int>(b));
    return;
  }
  if (device_memory_ && compression_ != Compression::None) {
    // Collective (on the communicator's stream): PyTorch's fp16/bf16 hook on the device: cast,
    // divide by the world size in 16 bits, 16-bit sum; decoded in finish().
    request_[b] = comm_->start_allreduce_avg16(grads, compression_ == Compression::Bf16);
    const std::size_t bytes = grads.size() * sizeof(std::uint16_t);
    stats_.payload_bytes += bytes;
    stats_.wire_bytes += static_cast<std::uint64_t>(2.0 * (r - 1) / r * bytes);
  } else if (compression_ == Compression::None) {
    // Collective (non-blocking where the comm supports it): this bucket's gradients, summed over
    // ranks, while backward computes the earlier layers.
    request_[b] = comm_->start_allreduce_sum(grads);
    stats_.payload_bytes += grads.size_bytes();
    stats_.wire_bytes += static_cast<std::uint64_t>(2.0 * (r - 1) / r * grads.size_bytes());
  } else {
    // PyTorch's fp16/bf16 hook: cast, divide by the world size in 16 bits, then a 16-bit sum.
    auto& enc = encoded_[b];
    encode16(grads, enc, compression_);
    const bool bf16 = compression_ == Compression::Bf16;
    for (auto& h : enc) {
      h = bf16 ? to_bf16(from_bf16(h) / static_cast<float>(r))
               : to_fp16(from_fp16(h) / static_cast<float>(r));
    }
    // Collective (non-blocking): the 16-bit encoding, summed by a user-defined MPI reduction.
    request_[b] = comm_->start_allreduce_sum16(enc, bf16);
    stats_.payload_bytes += enc.size() * sizeof(std::uint16_t);
    stats_.wire_bytes +=
        static_cast<std::uint64_t>(2.0 * (r - 1) / r * enc.size() * sizeof(std::uint16_t));
  }
  launch_order_.push_back(static_cast<int>(b));
}

void Reducer::layer_ready(int layer) {
  if (!overlap_ || powersgd_) return;
  if (launch_order_.size() == buckets_.size()) launch_order_.clear();  // a new step
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const auto& ls = buckets_[b].layers;
    if (std::find(ls.begin(), ls.end(), layer) != ls.end() && --ready_[b] == 0) launch(b);
  }
  if (worker_.joinable()) return;  // the thread progresses its own all-reduces
  // Progress what is in flight (MPI moves non-blocking collectives only inside MPI calls).
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (request_[b] != -2 && !done_[b] && comm_->test(request_[b])) {
      done_[b] = true;
      stats_.comm_seconds += now() - started_[b];
    }
  }
}

void Reducer::finish() {
  finish_step();
  last_payload_ = stats_.payload_bytes - payload_mark_;
  last_wire_ = stats_.wire_bytes - wire_mark_;
  payload_mark_ = stats_.payload_bytes;
  wire_mark_ = stats_.wire_bytes;
}

void Reducer::note_replayed_step() {
  stats_.payload_bytes += last_payload_;
  stats_.wire_bytes += last_wire_;
  ++stats_.steps;
  payload_mark_ = stats_.payload_bytes;
  wire_mark_ = stats_.wire_bytes;
}

Reducer::Mark Reducer::mark() const {
  return Mark{stats_, payload_mark_, wire_mark_, last_payload_, last_wire_};
}

void Reducer::rewind(const Mark& m) {
  MNIST_DDP_CHECK(!worker_.joinable() && !powersgd_,
                  "only the device-memory reducer can forget a step");
  stats_ = m.stats;
  payload_mark_ = m.payload_mark;
  wire_mark_ = m.wire_mark;
  last_payload_ = m.last_payload;
  last_wire_ = m.last_wire;
  launch_order_.clear();
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    ready_[b] = static_cast<int>(buckets_[b].layers.size());
    request_[b] = -2;
    done_[b] = false;
  }
}

void Reducer::finish_step() {
  const double t0 = now();
  ++stats_.steps;
  if (powersgd_) {
    const double r = comm_->size();
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      // Collectives (inside): this bucket's PowerSGD all-reduces, in bucket order on every rank.
      powersgd_->reduce(b, model_.grads().subspan(buckets_[b].offset, buckets_[b].count));
      stats_.payload_bytes += powersgd_->last_payload_bytes();
      stats_.wire_bytes +=
          static_cast<std::uint64_t>(2.0 * (r - 1) / r * powersgd_->last_payload_bytes());
    }
    powersgd_->next_iter();
    const double t = now() - t0;
    stats_.comm_seconds += t;
    stats_.exposed_seconds += t;
    return;
  }
  if (!overlap_ && compression_ != Compression::None) {
    // No overlap with a hook: every bucket now, one after the other.
    launch_order_.clear();
    for (std::size_t b = 0; b < buckets_.size(); ++b) launch(b);
  }
  if (!overlap_ && compression_ == Compression::None) {
    launch_order_.clear();
    // Collective: one all-reduce of the whole arena after backward (the comparison mode).
    const auto g = model_.grads();
    const double r = comm_->size();
    stats_.wire_bytes += static_cast<std::uint64_t>(2.0 * (r - 1) / r * g.size_bytes());
    stats_.payload_bytes += g.size_bytes();
    comm_->allreduce_avg(g);
    const double t = now() - t0;
    stats_.comm_seconds += t;
    stats_.exposed_seconds += t;
    return;
  }
  if (worker_.joinable()) {
    // Wait for the communication thread to finish every bucket of this step.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] {
      return std::all_of(finished_at_.begin(), finished_at_.end(), [](double t) { return t >= 0; });
    });
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      stats_.comm_seconds += finished_at_[b] - started_[b];
      finished_at_[b] = -1.0;
      done_[b] = true;
    }
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    MNIST_DDP_CHECK(request_[b] != -2, "a bucket's gradients were never reported ready");
    auto grads = model_.grads().subspan(buckets_[b].offset, buckets_[b].count);
    if (worker_.joinable()) {
      // Reduced by the thread (host memory).
      if (compression_ != Compression::None) {
        decode16(encoded_[b], grads, compression_);  // already divided before the sum
      } else {
        // Sum, then divide (bit-identical to allreduce_avg on the whole arena).
        const float n = static_cast<float>(comm_->size());
        for (float& x : grads) x /= n;
      }
      continue;
    }
    if (device_memory_ && compression_ != Compression::None) {
      comm_->finish_allreduce_avg16(request_[b], grads, compression_ == Compression::Bf16);
    } else if (compression_ != Compression::None) {
      comm_->wait(request_[b]);  // completes (or releases) the request
      decode16(encoded_[b], grads, compression_);
    } else {
      // Sum, then divide, in the communicator's memory (the host, or the GPU for NCCL).
      comm_->finish_allreduce_avg(request_[b], grads);
    }
    if (!done_[b]) stats_.comm_seconds += now() - started_[b];
  }
  stats_.exposed_seconds += now() - t0;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    ready_[b] = static_cast<int>(buckets_[b].layers.size());
    request_[b] = -2;
    done_[b] = false;
  }
}

void Reducer::use_comm(Comm& comm) {
  MNIST_DDP_CHECK(!powersgd_ || &comm == comm_, "PowerSGD keeps its group");
  MNIST_DDP_CHECK(!worker_.joinable() || &comm == comm_,
                  "the communication thread keeps its group");
  comm_ = &comm;
}

ReducerStats Reducer::take_stats() {
  const ReducerStats s = stats_;
  stats_ = {};
  payload_mark_ = wire_mark_ = 0;
  return s;
}

}  // namespace mnist_ddp
