// model.cpp — ConvNet forward/backward over Ops, arena layout and PyTorch default init.
#include "mnist_ddp/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {

namespace {
// The timeline's span names per layer (0 layer1, 1 layer2, 2 fc).
constexpr const char* kForwardSpans[ConvNet::kLayers] = {"forward layer1", "forward layer2",
                                                         "forward fc"};
constexpr const char* kBackwardSpans[ConvNet::kLayers] = {"backward layer1", "backward layer2",
                                                          "backward fc"};
constexpr double kBnEps = 1e-5;
constexpr double kBnMomentum = 0.1;
constexpr int kFcIn = 32 * 7 * 7;

std::size_t numel_of(const std::vector<int>& s) {
  std::size_t n = 1;
  for (int d : s) n *= static_cast<std::size_t>(d);
  return n;
}
}  // namespace

// One conv -> BN -> ReLU -> maxpool stage. BN-apply, ReLU and the pool run as one fused op
// (bn_relu_pool_*), so the BN output is never materialised.
struct ConvNet::Block {
  std::string prefix;  // "layer1" / "layer2"
  ConvGeom geom;
  Tensor conv_out;                 // [K][N][H][W] conv output (BN input)
  Tensor pooled;                   // [K][N][H/2][W/2] block output
  Tensor d_pooled;                 // [K][N][H/2][W/2] its gradient
  Tensor d_conv;                   // [K][N][H][W] gradient at the conv output (backward scratch)
  Tensor mean, invstd;             // [K] statistics used by the forward (batch or running)
  std::uint8_t* argmax = nullptr;  // [K][N][H/2][W/2]
};

ConvNet::ConvNet(Ops& ops, int max_batch) : ops_(ops), max_batch_(max_batch) {
  MNIST_DDP_CHECK(max_batch >= 1, "max_batch must be positive");
  const Device dev = ops.device();
  auto add = [](std::vector<ArenaEntry>& v, std::string name, std::vector<int> shape) {
    const std::size_t off = v.empty() ? 0 : v.back().offset + v.back().numel;
    const std::size_t n = numel_of(shape);
    v.push_back({std::move(name), std::move(shape), off, n});
  };
  // state_dict order.
  add(param_entries_, "layer1.0.weight", {16, 1, 5, 5});
  add(param_entries_, "layer1.0.bias", {16});
  add(param_entries_, "layer1.1.weight", {16});
  add(param_entries_, "layer1.1.bias", {16});
  add(param_entries_, "layer2.0.weight", {32, 16, 5, 5});
  add(param_entries_, "layer2.0.bias", {32});
  add(param_entries_, "layer2.1.weight", {32});
  add(param_entries_, "layer2.1.bias", {32});
  add(param_entries_, "fc.weight", {10, kFcIn});
  add(param_entries_, "fc.bias", {10});
  add(buffer_entries_, "layer1.1.running_mean", {16});
  add(buffer_entries_, "layer1.1.running_var", {16});
  add(buffer_entries_, "layer2.1.running_mean", {32});
  add(buffer_entries_, "layer2.1.running_var", {32});
  const std::size_t np = param_entries_.back().offset + param_entries_.back().numel;
  const std::size_t nb = buffer_entries_.back().offset + buffer_entries_.back().numel;
  params_ = Tensor({static_cast<int>(np)}, dev);
  grads_ = Tensor({static_cast<int>(np)}, dev);
  buffers_ = Tensor({static_cast<int>(nb)}, dev);

  const int n = max_batch;
  blocks_.resize(2);
  blocks_[0].prefix = "layer1";
  blocks_[0].geom = ConvGeom{n, 1, 28, 28, 16, 5, 2};
  blocks_[1].prefix = "layer2";
  blocks_[1].geom = ConvGeom{n, 16, 14, 14, 32, 5, 2};
  for (Block& b : blocks_) {
    const int k = b.geom.k, h = b.geom.out_h(), w = b.geom.out_w();
    b.conv_out = Tensor({k, n, h, w}, dev);
    b.pooled = Tensor({k, n, h / 2, w / 2}, dev);
    b.d_pooled = Tensor({k, n, h / 2, w / 2}, dev);
    b.d_conv = Tensor({k, n, h, w}, dev);
    b.mean = Tensor({k}, dev);
    b.invstd = Tensor({k}, dev);
    b.argmax = ops_.alloc_bytes(static_cast<std::size_t>(k) * n * (h / 2) * (w / 2));
  }
  flat_ = Tensor({n, kFcIn}, dev);
  dflat_ = Tensor({n, kFcIn}, dev);
  logits_ = Tensor({n, 10}, dev);
}

ConvNet::~ConvNet() {
  for (Block& b : blocks_) ops_.free_bytes(b.argmax);
}

float* ConvNet::param(const char* name) {
  for (const auto& e : param_entries_)
    if (e.name == name) return params_.data() + e.offset;
  fail_internal(std::string("no parameter ") + name, __FILE__, __LINE__);
}
float* ConvNet::grad(const char* name) {
  for (const auto& e : param_entries_)
    if (e.name == name) return grads_.data() + e.offset;
  fail_internal(std::string("no parameter ") + name, __FILE__, __LINE__);
}
float* ConvNet::buffer(const char* name) {
  for (const auto& e : buffer_entries_)
    if (e.name == name) return buffers_.data() + e.offset;
  fail_internal(std::string("no buffer ") + name, __FILE__, __LINE__);
}

std::pair<std::size_t, std::size_t> ConvNet::layer_range(int layer) const {
  // layer1 = entries 0..3, layer2 = 4..7, fc = 8..9 (contiguous in the arena).
  static constexpr int kFirst[] = {0, 4, 8, 10};
  MNIST_DDP_CHECK(layer >= 0 && layer < kLayers, "layer index out of range");
  const auto& a = param_entries_[kFirst[layer]];
  const auto& b = param_entries_[kFirst[layer + 1] - 1];
  return {a.offset, b.offset + b.numel - a.offset};
}

void ConvNet::init(std::uint64_t seed) {
  // Drawn on the host in state_dict order (the PRNG is specified), then placed in backend memory.
  std::vector<float> host_params(params_.numel()), host_buffers(buffers_.numel());
  SplitMix64 rng(seed);
  for (const auto& e : param_entries_) {
    float* p = host_params.data() + e.offset;
    const bool is_bn = e.name.find(".1.") != std::string::npos;
    if (is_bn) {
      const bool weight = e.name.ends_with("weight");
      for (std::size_t i = 0; i < e.numel; ++i) p[i] = weight ? 1.0f : 0.0f;
      continue;
    }
    // fan_in of the layer this tensor belongs to (the weight's shape[1:] product).
    int fan_in = 0;
    for (const auto& w : param_entries_) {
      if (w.name == e.name.substr(0, e.name.rfind('.')) + ".weight") {
        fan_in = static_cast<int>(w.numel / static_cast<std::size_t>(w.shape[0]));
      }
    }
    const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
    for (std::size_t i = 0; i < e.numel; ++i) p[i] = rng.uniform(-bound, bound);
  }
  for (const auto& e : buffer_entries_) {
    float* b = host_buffers.data() + e.offset;
    const float v = e.name.ends_with("running_var") ? 1.0f : 0.0f;
    for (std::size_t i = 0; i < e.numel; ++i) b[i] = v;
  }
  load_state(host_params, host_buffers, std::vector<std::int64_t>{0, 0});
}

void ConvNet::load_state(std::span<const float> params, std::span<const float> buffers,
                         std::span<const std::int64_t> num_batches_tracked) {
  MNIST_DDP_CHECK(params.size() == params_.numel() && buffers.size() == buffers_.numel() &&
                      num_batches_tracked.size() == num_batches_tracked_.size(),
                  "a model state of another shape");
  ops_.upload(params.data(), params_.data(), params.size() * sizeof(float));
  ops_.upload(buffers.data(), buffers_.data(), buffers.size() * sizeof(float));
  std::copy(num_batches_tracked.begin(), num_batches_tracked.end(), num_batches_tracked_.begin());
}

const float* ConvNet::forward(const float* x, int n, Mode mode) {
  MNIST_DDP_CHECK(n >= 1 && n <= max_batch_, "batch larger than the model was sized for");
  n_ = n;
  mode_ = mode;
  input_ = x;
  const float* in = x;  // [C][N][H][W]; for the input C = 1 so NCHW == CNHW
  for (std::size_t bi = 0; bi < blocks_.size(); ++bi) {
    Block& b = blocks_[bi];
    const TraceScope span(tracer_, kForwardSpans[bi], Track::Compute,
                          SpanArgs{.layer = kLayerNames[bi]});
    ConvGeom g = b.geom;
    g.n = n;
    const int k = g.k, h = g.out_h(), w = g.out_w();
    const std::string pre = b.prefix;
    ops_.conv2d_forward(g, in, param((pre + ".0.weight").c_str()), param((pre + ".0.bias").c_str()),
                        b.conv_out.data());
    float* gamma = param((pre + ".1.weight").c_str());
    float* beta = param((pre + ".1.bias").c_str());
    float* rm = buffer((pre + ".1.running_mean").c_str());
    float* rv = buffer((pre + ".1.running_var").c_str());
    if (mode == Mode::Train) {
      ops_.batchnorm_stats(k, n, h * w, b.conv_out.data(), kBnEps, kBnMomentum, b.mean.data(),
                           b.invstd.data(), rm, rv);
    } else {
      ops_.batchnorm_eval_stats(k, rm, rv, kBnEps, b.mean.data(), b.invstd.data());
    }
    ops_.bn_relu_pool_forward(k, n, h, w, b.conv_out.data(), gamma, beta, b.mean.data(),
                              b.invstd.data(), b.pooled.data(), b.argmax);
    in = b.pooled.data();
  }
  const TraceScope span(tracer_, kForwardSpans[2], Track::Compute,
                        SpanArgs{.layer = kLayerNames[2]});
  // Flatten in PyTorch's order: activation layout -> [N][32*49].
  ops_.to_fc_rows(32, n, 49, in, flat_.data());
  ops_.linear_forward(n, kFcIn, 10, flat_.data(), param("fc.weight"), param("fc.bias"),
                      logits_.data());
  return logits_.data();
}

void ConvNet::count_train_batch() {
  for (auto& n : num_batches_tracked_) n += 1;
}

void ConvNet::backward(const float* dlogits, const std::function<void(int layer)>& on_ready) {
  MNIST_DDP_CHECK(mode_ != Mode::Eval, "backward after an eval-mode forward");
  const int n = n_;
  {
    const TraceScope span(tracer_, kBackwardSpans[2], Track::Compute,
                          SpanArgs{.layer = kLayerNames[2]});
    ops_.linear_backward(n, kFcIn, 10, flat_.data(), param("fc.weight"), dlogits, dflat_.data(),
                         grad("fc.weight"), grad("fc.bias"));
  }
  if (on_ready) on_ready(2);
  // Unflatten the gradient into block 2's pooled layout.
  ops_.from_fc_rows(32, n, 49, dflat_.data(), blocks_[1].d_pooled.data());
  for (int bi = static_cast<int>(blocks_.size()) - 1; bi >= 0; --bi) {
    Block& b = blocks_[static_cast<std::size_t>(bi)];
    std::optional<TraceScope> span;  // closed before on_ready: the bucket launch is not backward
    span.emplace(tracer_, kBackwardSpans[bi], Track::Compute,
                 SpanArgs{.layer = kLayerNames[static_cast<std::size_t>(bi)]});
    ConvGeom g = b.geom;
    g.n = n;
    const int k = g.k, h = g.out_h(), w = g.out_w();
    const std::string pre = b.prefix;
    const BnReluPoolGrad bn{.c = k,
                            .n = n,
                            .h = h,
                            .w = w,
                            .x = b.conv_out.data(),
                            .y = b.pooled.data(),
                            .dy = b.d_pooled.data(),
                            .argmax = b.argmax,
                            .gamma = param((pre + ".1.weight").c_str()),
                            .mean = b.mean.data(),
                            .invstd = b.invstd.data(),
                            .batch_stats = mode_ == Mode::Train,
                            .dx = b.d_conv.data(),
                            .dgamma = grad((pre + ".1.weight").c_str()),
                            .dbeta = grad((pre + ".1.bias").c_str())};
    const float* in = bi == 0 ? input_ : blocks_[static_cast<std::size_t>(bi) - 1].pooled.data();
    // The input gradient of layer2 is layer1's pooled gradient; layer1 needs none (the image is
    // not trained), which saves a third of layer1's backward. One call for the block lets a
    // backend make the convolution's two gradients concurrently (CUDA: two streams, joined before
    // it returns) and keep d_conv in the form its convolution reads (CPU --amp bf16: bf16 only).
    float* d_in = bi > 0 ? blocks_[static_cast<std::size_t>(bi) - 1].d_pooled.data() : nullptr;
    ops_.bn_relu_pool_conv_backward(bn, g, in, param((pre + ".0.weight").c_str()),
                                    grad((pre + ".0.weight").c_str()),
                                    grad((pre + ".0.bias").c_str()), d_in);
    span.reset();
    if (on_ready) on_ready(bi);
  }
}

}  // namespace mnist_ddp
