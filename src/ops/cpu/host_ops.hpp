// host_ops.hpp — HostOps: the part of the Ops interface that is the same for every backend whose
// buffers live in host memory and whose ops do not depend on the activation layout (fc layer,
// loss, top-k, SGD, BN eval statistics, byte buffers). The CPU backends derive from it.
#pragma once

#include <vector>

#include "mnist_ddp/ops/ops.hpp"

namespace mnist_ddp {

class HostOps : public Ops {
 public:
  Device device() const override { return Device::Cpu; }
  void batchnorm_eval_stats(int c, const float* running_mean, const float* running_var, double eps,
                            float* mean, float* invstd) override;
  void linear_forward(int n, int in, int out, const float* x, const float* w, const float* b,
                      float* y) override;
  void linear_backward(int n, int in, int out, const float* x, const float* w, const float* dy,
                       float* dx, float* dw, float* db) override;
  double softmax_cross_entropy(int n, int classes, const float* logits, const std::int32_t* labels,
                               float* dlogits, double grad_scale) override;
  int topk_correct(int n, int classes, const float* logits, const std::int32_t* labels,
                   int k) override;
  void encode_half(std::size_t n, const float* g, std::uint16_t* h, DType type,
                   float divisor) override;
  void decode_half(std::size_t n, const std::uint16_t* h, float* g, DType type) override;
  void add_into(std::size_t n, const float* x, float* y) override;
  void zero(std::size_t n, float* y) override;
  std::uint8_t* alloc_bytes(std::size_t n) override;
  void free_bytes(std::uint8_t* p) override;
  void upload(const void* host, void* backend, std::size_t bytes) override;
  void download(const void* backend, void* host, std::size_t bytes) override;
  void load_dataset(int slot, const Dataset& d) override;
  void set_order(int slot, std::span<const std::int64_t> order) override;
  void gather(int slot, std::int64_t offset, int n, float mean, float std, float* x,
              std::int32_t* y) override;
  void set_step_scalars(const StepScalars& s) override { scalars_ = s; }
  void gather_at_step(int slot, int n, float mean, float std, float* x, std::int32_t* y) override;
  void sgd_step(std::size_t n, float* p, const float* g, float* momentum_buf,
                const SgdParams& s) override;
  void accumulate_loss(int n, int classes, const float* logits, const std::int32_t* labels,
                       float* dlogits, double grad_scale) override;
  double take_loss_sum() override;
  void* stream() const override { return nullptr; }
  std::unique_ptr<StampClock> make_stamp_clock() override { return make_host_stamp_clock(); }
  void set_bn_sync(const BnSync* sync) override { bn_sync_ = sync; }
  // Anything but Off is a UserError here; the oneDNN backend takes bf16 (dnnl_backend.cpp).
  void set_amp(AmpMode mode, const float* loss_scale, const float* skip_step) override;

 protected:
  const BnSync* bn_sync_ = nullptr;  // for the layout-specific BN ops of the derived backends

 private:
  const Dataset* data_[2] = {nullptr, nullptr};  // host memory is backend memory: no copy
  std::vector<std::int64_t> order_[2];
  StepScalars scalars_;
  double loss_sum_ = 0;
};

}  // namespace mnist_ddp
