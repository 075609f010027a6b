// host_ops.cpp — the layout-independent host ops shared by the CPU backends (reference kernels).
#include "ops/cpu/host_ops.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "mnist_ddp/base/half.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "ops/cpu/cpu_kernels.hpp"

namespace mnist_ddp {

void HostOps::batchnorm_eval_stats(int c, const float* running_mean, const float* running_var,
                                   double eps, float* mean, float* invstd) {
  cpu::batchnorm_eval_stats(c, running_mean, running_var, eps, mean, invstd);
}
void HostOps::linear_forward(int n, int in, int out, const float* x, const float* w, const float* b,
                             float* y) {
  cpu::linear_forward(n, in, out, x, w, b, y);
}
void HostOps::linear_backward(int n, int in, int out, const float* x, const float* w,
                              const float* dy, float* dx, float* dw, float* db) {
  cpu::linear_backward(n, in, out, x, w, dy, dx, dw, db);
}
double HostOps::softmax_cross_entropy(int n, int classes, const float* logits,
                                      const std::int32_t* labels, float* dlogits,
                                      double grad_scale) {
  return cpu::softmax_cross_entropy(n, classes, logits, labels, dlogits, grad_scale);
}
int HostOps::topk_correct(int n, int classes, const float* logits, const std::int32_t* labels,
                          int k) {
  return cpu::topk_correct(n, classes, logits, labels, k);
}
void HostOps::encode_half(std::size_t n, const float* g, std::uint16_t* h, DType type,
                          float divisor) {
  MNIST_DDP_CHECK(is_half(type), "encode_half: F16 or BF16");
  if (type == DType::F16) {
    for (std::size_t i = 0; i < n; ++i) h[i] = to_fp16(from_fp16(to_fp16(g[i])) / divisor);
  } else {
    for (std::size_t i = 0; i < n; ++i) h[i] = to_bf16(from_bf16(to_bf16(g[i])) / divisor);
  }
}
void HostOps::decode_half(std::size_t n, const std::uint16_t* h, float* g, DType type) {
  MNIST_DDP_CHECK(is_half(type), "decode_half: F16 or BF16");
  if (type == DType::F16) {
    for (std::size_t i = 0; i < n; ++i) g[i] = from_fp16(h[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) g[i] = from_bf16(h[i]);
  }
}
void HostOps::add_into(std::size_t n, const float* x, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}
void HostOps::zero(std::size_t n, float* y) {
  std::fill(y, y + n, 0.0f);
}
std::uint8_t* HostOps::alloc_bytes(std::size_t n) {
  return static_cast<std::uint8_t*>(std::malloc(n > 0 ? n : 1));
}
void HostOps::free_bytes(std::uint8_t* p) {
  std::free(p);
}

void HostOps::upload(const void* host, void* backend, std::size_t bytes) {
  if (bytes > 0 && host != backend) std::memcpy(backend, host, bytes);
}
void HostOps::download(const void* backend, void* host, std::size_t bytes) {
  if (bytes > 0 && host != backend) std::memcpy(host, backend, bytes);
}
void HostOps::load_dataset(int slot, const Dataset& d) {
  MNIST_DDP_CHECK(slot == kTrainSplit || slot == kEvalSplit, "dataset slot");
  data_[slot] = &d;
}
void HostOps::set_amp(AmpMode mode, const float*, const float*) {
  if (mode != AmpMode::Off) {
    throw UserError(std::string("--amp ") + amp_mode_name(mode) +
                    (mode == AmpMode::Bf16
                         ? ": bf16 on the CPU runs on the oneDNN backend only (drop --cpu-kernels "
                           "reference, or drop --amp)"
                         : ": the CPU has no fp16 training units (use --amp bf16 on a CPU with "
                           "AVX512-BF16 or AMX, drop --amp, or run with --device cuda)"));
  }
}

void HostOps::set_order(int slot, std::span<const std::int64_t> order) {
  MNIST_DDP_CHECK(slot == kTrainSplit || slot == kEvalSplit, "dataset slot");
  order_[slot].assign(order.begin(), order.end());
}
void HostOps::gather(int slot, std::int64_t offset, int n, float mean, float std, float* x,
                     std::int32_t* y) {
  MNIST_DDP_CHECK(data_[slot] != nullptr, "gather before load_dataset");
  MNIST_DDP_CHECK(offset >= 0 && offset + n <= static_cast<std::int64_t>(order_[slot].size()),
                  "gather outside the visiting order");
  gather_batch(*data_[slot],
               std::span<const std::int64_t>(order_[slot])
                   .subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(n)),
               mean, std, x, y);
}
void HostOps::gather_at_step(int slot, int n, float mean, float std, float* x, std::int32_t* y) {
  gather(slot, scalars_.offset, n, mean, std, x, y);
}
void HostOps::sgd_step(std::size_t n, float* p, const float* g, float* buf, const SgdParams& s) {
  SgdParams at = s;
  at.lr = scalars_.lr;
  cpu::sgd_step(n, p, g, buf, at, scalars_.first_step);
}
void HostOps::accumulate_loss(int n, int classes, const float* logits, const std::int32_t* labels,
                              float* dlogits, double grad_scale) {
  loss_sum_ += softmax_cross_entropy(n, classes, logits, labels, dlogits, grad_scale);
}
double HostOps::take_loss_sum() {
  const double s = loss_sum_;
  loss_sum_ = 0;
  return s;
}

}  // namespace mnist_ddp
