// amp.cpp — the host side of mixed precision: mode names and the loss-scale rule (the oracle the
// GPU scaler is tested against).
#include "mnist_ddp/model/amp.hpp"

#include <cmath>

namespace mnist_ddp {

const char* amp_mode_name(AmpMode mode) {
  return name_in(kAmpModeNames, mode);
}

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
