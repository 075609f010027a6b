// model.hpp — the MNIST ConvNet over the Ops interface, with PyTorch's state_dict names, shapes
// and default initialisation. All parameters live in ONE flat arena and all gradients in ONE flat
// arena (same offsets), so DDP buckets are views, never copies.
//
//   layer1: Conv2d(1,16,5,p2) -> BatchNorm2d(16) -> ReLU -> MaxPool2d(2)   (N,16,14,14)
//   layer2: Conv2d(16,32,5,p2) -> BatchNorm2d(32) -> ReLU -> MaxPool2d(2)  (N,32,7,7)
//   fc:     Linear(1568,10)                                                (N,10)
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "mnist_ddp/model/tensor.hpp"
#include "mnist_ddp/ops/ops.hpp"

namespace mnist_ddp {

// A named slice of an arena (parameters, gradients or BN buffers).
struct ArenaEntry {
  std::string name;        // PyTorch state_dict key
  std::vector<int> shape;  // PyTorch shape
  std::size_t offset = 0;  // in elements
  std::size_t numel = 0;
};

// Train: batch statistics, running stats updated. Eval: running statistics. Frozen: train-mode
// step with BatchNorm using (and not updating) its running statistics, so samples are independent
// (used to test gradient averaging against the union batch).
enum class Mode { Train, Eval, Frozen };

class ConvNet {
 public:
  static constexpr int kLayers = 3;  // layer1, layer2, fc: the units of "gradient ready"
  // A layer's index (0, 1, 2: on_ready's and layer_range's) and its PyTorch name, the one the
  // timeline, the logs and the checkpoints use: index 0 is "layer1".
  static constexpr std::array<const char*, kLayers> kLayerNames = {"layer1", "layer2", "fc"};

  // Activations are allocated for batches of up to max_batch images.
  ConvNet(Ops& ops, int max_batch);
  ~ConvNet();
  ConvNet(const ConvNet&) = delete;
  ConvNet& operator=(const ConvNet&) = delete;

  // PyTorch's default init drawn from `seed` (rng.hpp): kaiming_uniform(a=sqrt(5)) weights, i.e.
  // U(+-1/sqrt(fan_in)), biases U(+-1/sqrt(fan_in)), BN weight 1 / bias 0, running mean 0 / var 1.
  void init(std::uint64_t seed);
  // The one way a model state enters the model: parameters and BN buffers (host memory, in the
  // arenas' PyTorch layout) uploaded to the backend, and the BN layers' num_batches_tracked
  // (init, a resumed checkpoint, --init-weights and --eval-only all come through here).
  void load_state(std::span<const float> params, std::span<const float> buffers,
                  std::span<const std::int64_t> num_batches_tracked);

  // x[N][1][28][28] -> logits[N][10] (pointer into the model's buffers, valid until next call).
  const float* forward(const float* x, int n, Mode mode);
  // dlogits[N][10] for the last forward. Gradients are written (not accumulated) into grads().
  // on_ready(layer) fires when layer's gradients are final: 2 (fc), then 1 (layer2), then 0
  // (layer1).
  void backward(const float* dlogits, const std::function<void(int layer)>& on_ready);
  // num_batches_tracked advances once per training batch, counted by the caller (the trainer,
  // once per step however the step ran: a CUDA graph replay runs no host code), not by forward.
  void count_train_batch();

  // Views of backend memory (device memory on a GPU backend: copy with Ops::download to read).
  std::span<float> params() { return {params_.data(), params_.numel()}; }
  std::span<float> grads() { return {grads_.data(), grads_.numel()}; }
  // running_mean / running_var of both BN layers (float), and their num_batches_tracked.
  std::span<float> buffers() { return {buffers_.data(), buffers_.numel()}; }
  std::span<std::int64_t> num_batches_tracked() { return num_batches_tracked_; }

  const std::vector<ArenaEntry>& param_entries() const { return param_entries_; }
  const std::vector<ArenaEntry>& buffer_entries() const { return buffer_entries_; }
  // [offset, offset+count) of a layer's parameters (and gradients) in the arena.
  std::pair<std::size_t, std::size_t> layer_range(int layer) const;
  int max_batch() const { return max_batch_; }
  Ops& ops() { return ops_; }
  // The timeline (trace.hpp): forward and backward of each layer become spans; nullptr: none.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }

 private:
  struct Block;  // conv -> BN -> ReLU -> pool, with its activations
  float* param(const char* name);
  float* grad(const char* name);
  float* buffer(const char* name);

  Ops& ops_;
  int max_batch_;
  int n_ = 0;  // batch of the last forward
  Mode mode_ = Mode::Train;
  Tensor params_, grads_, buffers_;
  std::vector<std::int64_t> num_batches_tracked_{0, 0};
  std::vector<ArenaEntry> param_entries_, buffer_entries_;
  std::vector<Block> blocks_;
  Tensor flat_;    // [N][1568] fc input (PyTorch flatten order)
  Tensor dflat_;   // its gradient
  Tensor logits_;  // [N][10]
  const float* input_ = nullptr;
  Tracer* tracer_ = nullptr;
};

}  // namespace mnist_ddp
