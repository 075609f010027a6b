// optimizer.hpp — SGD with momentum / weight decay / nesterov (PyTorch's update rule, see
// cpu_kernels.hpp SgdParams) over the flat parameter arena, and the learning-rate schedules.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "mnist_ddp/base/choices.hpp"
#include "mnist_ddp/base/enum_names.hpp"
#include "mnist_ddp/model/tensor.hpp"
#include "mnist_ddp/ops/ops.hpp"

namespace mnist_ddp {

struct LrConfig {
  double base_lr = 0.01;
  LrSchedule schedule = LrSchedule::Constant;
  int step_size = 1;  // Step: multiply by gamma every step_size epochs
  double gamma = 0.1;
  std::int64_t warmup_steps = 0;  // linear warm-up: lr * (step + 1) / warmup_steps
  std::int64_t total_steps = 1;   // Cosine: anneals to min_lr over the steps after warm-up
  double min_lr = 0.0;
};

// Learning rate for optimizer step `step` (0-based) taken during epoch `epoch` (0-based).
double learning_rate(const LrConfig& c, std::int64_t step, std::int64_t epoch);

class Sgd {
 public:
  Sgd(Ops& ops, std::size_t numel, const SgdParams& params);
  // Enqueues one update of params with grads at the lr and first-step flag the backend holds
  // (Ops::set_step_scalars), so it can be captured in a CUDA graph. Counts nothing: the trainer
  // counts every step once, however it ran (count_step).
  void step(std::span<float> params, std::span<const float> grads);
  void count_step() { ++steps_; }
  std::int64_t steps_taken() const { return steps_; }
  std::span<float> momentum_buffer() { return {buf_.data(), buf_.numel()}; }
  std::span<const float> momentum_buffer() const { return {buf_.data(), buf_.numel()}; }
  // Restores the momentum buffer and step count from a checkpoint.
  void restore(std::span<const float> momentum, std::int64_t steps);

 private:
  Ops& ops_;
  SgdParams params_;
  Tensor buf_;
  std::int64_t steps_ = 0;
};

}  // namespace mnist_ddp
