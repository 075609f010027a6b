// grad_scaler.hpp — --amp fp16's dynamic loss scale (the mode itself: base/amp_mode.hpp): the
// loss-scale rule of docs/DESIGN.md §5 (PyTorch's GradScaler defaults) as a host function that is
// the oracle for the device implementation, and the GradScaler that keeps the scale on the GPU so
// a whole step, skip included, stays capturable in a CUDA graph (ops/cuda/grad_scaler.cu).
//
// A step under --amp fp16:  dlogits *= scale (Ops::set_amp) -> backward in fp16 compute ->
// all-reduce (average) -> unscale_and_check: g *= 1/scale, found_inf = any non-finite g ->
// all-reduce(found_inf, max) so every rank agrees -> SGD skipped where found_inf -> update().
// --amp bf16 computes in bf16 without a scaler (bf16 has fp32's exponent range).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace mnist_ddp {

// PyTorch's torch.amp.GradScaler defaults.
struct LossScaleRule {
  float init_scale = 65536.f;
  float growth_factor = 2.f;
  float backoff_factor = 0.5f;
  std::int32_t growth_interval = 2000;  // clean steps in a row before the scale grows
};

struct LossScalerState {
  float scale = 65536.f;
  std::int32_t growth_tracker = 0;  // clean steps since the last growth or backoff
};

// One update after a step (PyTorch's _amp_update_scale_): a step with inf/NaN gradients backs
// the scale off and resets the tracker; growth_interval clean steps in a row grow it (only to a
// finite value) and reset the tracker.
void update_loss_scale(LossScalerState& s, bool found_inf, const LossScaleRule& rule);

// The scaler's state in backend memory; every method enqueues on the ops' stream.
class GradScaler {
 public:
  virtual ~GradScaler() = default;
  // Device float the loss gradient is multiplied by (Ops::set_amp).
  virtual const float* scale() const = 0;
  // Device float, 0 or 1: this step's gradients held inf/NaN (SGD skips the step where != 0).
  // The caller all-reduces it (max) between unscale_and_check and the optimizer step.
  virtual float* found_inf() = 0;
  // grads *= 1/scale; found_inf := whether any gradient is inf/NaN (before unscaling).
  virtual void unscale_and_check(std::span<float> grads) = 0;
  // update_loss_scale on the device from found_inf; counts skipped steps.
  virtual void update() = 0;
  // Host views (they synchronise; for logs and checkpoints, never per step).
  virtual LossScalerState state() const = 0;
  virtual void set_state(const LossScalerState& s) = 0;
  // Steps skipped since the last call.
  virtual std::int64_t take_skipped() = 0;
};

// The CUDA backend's implementation on its stream is made by Ops::make_grad_scaler
// (src/ops/cuda/grad_scaler.cu).

}  // namespace mnist_ddp
