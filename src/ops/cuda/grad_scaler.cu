// grad_scaler.cu — the dynamic loss scaler of --amp fp16 on the GPU (ops/grad_scaler.hpp): scale,
// growth tracker, found-inf flag and a skipped-step count live in one device struct, and
// unscale/check and the scale update are kernels on the ops' stream, so a training step, skip
// included, needs no host round trip and can be captured in a CUDA graph. update_loss_scale
// (src/ops/grad_scaler.cpp) is the host oracle these kernels are tested against
// (tests/unit/gpu_ops_test.cpp).
#include <cuda_runtime.h>

#include <cmath>
#include <memory>

#include "mnist_ddp/base/amp_mode.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/diagnostics/cuda/cuda_check.hpp"
#include "mnist_ddp/ops/grad_scaler.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "ops/cuda/cuda_ops.hpp"

namespace mnist_ddp {
namespace {

constexpr int kThreads = 256;

struct DeviceScalerState {
  float scale;
  std::int32_t growth_tracker;
  float found_inf;  // 0 or 1; a float so the ranks can agree on it with an all-reduce (max)
  std::int32_t pad;
  long long skipped;  // steps skipped since take_skipped()
};

// g[i] *= 1/scale (the reciprocal in double, then float, as PyTorch); found_inf := 1 where a
// gradient is inf/NaN. Many threads may store the same 1: benign.
__global__ void unscale_check_kernel(std::size_t n, float* g, DeviceScalerState* s) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float inv = static_cast<float>(1.0 / static_cast<double>(s->scale));
  const float v = g[i];
  if (!isfinite(v)) s->found_inf = 1.f;
  g[i] = v * inv;
}

// update_loss_scale on the device (one thread), after the optimizer step read found_inf.
__global__ void update_kernel(DeviceScalerState* s, LossScaleRule rule) {
  if (s->found_inf != 0.f) {
    s->scale *= rule.backoff_factor;
    s->growth_tracker = 0;
    s->skipped += 1;
    return;
  }
  const std::int32_t clean = s->growth_tracker + 1;
  if (clean == rule.growth_interval) {
    const float grown = s->scale * rule.growth_factor;
    if (isfinite(grown)) s->scale = grown;
    s->growth_tracker = 0;
  } else {
    s->growth_tracker = clean;
  }
}

class CudaGradScaler final : public GradScaler {
 public:
  CudaGradScaler(Ops& ops, const LossScaleRule& rule)
      : stream_(static_cast<cudaStream_t>(ops.stream())), rule_(rule) {
    MNIST_DDP_CHECK(ops.device() == Device::Cuda && stream_ != nullptr,
                    "the GPU loss scaler needs the CUDA backend");
    CUDA_CHECK(cudaMalloc(&dev_, sizeof(DeviceScalerState)));
    set_state(LossScalerState{rule.init_scale, 0});
  }
  ~CudaGradScaler() override { cudaFree(dev_); }

  const float* scale() const override { return &dev_->scale; }
  float* found_inf() override { return &dev_->found_inf; }
  void unscale_and_check(std::span<float> grads) override {
    CUDA_CHECK(cudaMemsetAsync(&dev_->found_inf, 0, sizeof(float), stream_));
    const auto blocks = static_cast<unsigned>((grads.size() + kThreads - 1) / kThreads);
    if (blocks > 0) {
      unscale_check_kernel<<<blocks, kThreads, 0, stream_>>>(grads.size(), grads.data(), dev_);
      CUDA_CHECK(cudaGetLastError());
    }
  }
  void update() override {
    update_kernel<<<1, 1, 0, stream_>>>(dev_, rule_);
    CUDA_CHECK(cudaGetLastError());
  }
  LossScalerState state() const override {
    DeviceScalerState h{};
    // Sync: the legacy-stream copy waits for the steps queued on the ops' stream.
    CUDA_CHECK(cudaMemcpy(&h, dev_, sizeof h, cudaMemcpyDeviceToHost));
    return LossScalerState{h.scale, h.growth_tracker};
  }
  void set_state(const LossScalerState& s) override {
    if (!(std::isfinite(s.scale) && s.scale > 0.f)) {
      throw UserError("--amp fp16: a loss scale must be finite and positive (checkpoint's /amp)");
    }
    DeviceScalerState h{};
    h.scale = s.scale;
    h.growth_tracker = s.growth_tracker;
    CUDA_CHECK(cudaMemcpy(dev_, &h, sizeof h, cudaMemcpyHostToDevice));
  }
  std::int64_t take_skipped() override {
    long long n = 0;
    CUDA_CHECK(cudaMemcpy(&n, &dev_->skipped, sizeof n, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemsetAsync(&dev_->skipped, 0, sizeof n, stream_));
    return n;
  }

 private:
  cudaStream_t stream_;
  LossScaleRule rule_;
  DeviceScalerState* dev_ = nullptr;
};

}  // namespace

namespace cuda_ops {

std::unique_ptr<GradScaler> CudaOps::make_grad_scaler(const LossScaleRule& rule) {
  return std::make_unique<CudaGradScaler>(*this, rule);
}

}  // namespace cuda_ops

}  // namespace mnist_ddp
