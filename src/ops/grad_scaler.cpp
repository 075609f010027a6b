// grad_scaler.cpp — the host side of the dynamic loss scale: its rule (the oracle the GPU scaler,
// ops/cuda/grad_scaler.cu, is tested against).
#include "mnist_ddp/ops/grad_scaler.hpp"

#include <cmath>

namespace mnist_ddp {

void update_loss_scale(LossScalerState& s, bool found_inf, const LossScaleRule& rule) {
  if (found_inf) {
    s.scale *= rule.backoff_factor;
    s.growth_tracker = 0;
    return;
  }
  const std::int32_t clean = s.growth_tracker + 1;
  if (clean == rule.growth_interval) {
    const float grown = s.scale * rule.growth_factor;
    if (std::isfinite(grown)) s.scale = grown;
    s.growth_tracker = 0;
  } else {
    s.growth_tracker = clean;
  }
}

}  // namespace mnist_ddp
