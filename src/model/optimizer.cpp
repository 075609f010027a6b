// optimizer.cpp — SGD over the flat arena and learning-rate schedules.
#include "mnist_ddp/model/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {

double learning_rate(const LrConfig& c, std::int64_t step, std::int64_t epoch) {
  if (c.warmup_steps > 0 && step < c.warmup_steps) {
    return c.base_lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  }
  switch (c.schedule) {
    case LrSchedule::Constant:
      return c.base_lr;
    case LrSchedule::Step:
      return c.base_lr * std::pow(c.gamma, static_cast<double>(epoch / std::max(1, c.step_size)));
    case LrSchedule::Cosine: {
      const double span =
          static_cast<double>(std::max<std::int64_t>(1, c.total_steps - c.warmup_steps));
      const double t = std::clamp(static_cast<double>(step - c.warmup_steps) / span, 0.0, 1.0);
      return c.min_lr + (c.base_lr - c.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
    }
  }
  return c.base_lr;
}

Sgd::Sgd(Ops& ops, std::size_t numel, const SgdParams& params)
    : ops_(ops), params_(params), buf_({static_cast<int>(numel)}, ops.device()) {}

void Sgd::step(std::span<float> params, std::span<const float> grads) {
  MNIST_DDP_CHECK(params.size() == grads.size() && params.size() == buf_.numel(),
                  "optimizer sized for another arena");
  ops_.sgd_step(params.size(), params.data(), grads.data(), buf_.data(), params_);
}

void Sgd::restore(std::span<const float> momentum, std::int64_t steps) {
  MNIST_DDP_CHECK(momentum.size() == buf_.numel(), "momentum buffer of another size");
  ops_.upload(momentum.data(), buf_.data(), momentum.size_bytes());
  steps_ = steps;
}

}  // namespace mnist_ddp
