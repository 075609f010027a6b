// tensor.cpp — Tensor allocation and ownership.
#include "mnist_ddp/model/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {

Tensor::Tensor(std::vector<int> shape, Device device) : shape_(std::move(shape)), device_(device) {
  numel_ = 1;
  for (int d : shape_) {
    MNIST_DDP_CHECK(d >= 0, "negative tensor dimension");
    numel_ *= static_cast<std::size_t>(d);
  }
  const std::size_t bytes = ((numel_ * sizeof(float) + 63) / 64) * 64;
  if (bytes == 0) return;
  if (device_ == Device::Cuda) {
    data_ = static_cast<float*>(cuda_alloc(bytes));
  } else {
    data_ = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(data_, 0, bytes);
  }
}

Tensor::~Tensor() {
  release();
}

Tensor::Tensor(Tensor&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      numel_(std::exchange(o.numel_, 0)),
      shape_(std::move(o.shape_)),
      device_(o.device_) {}

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    numel_ = std::exchange(o.numel_, 0);
    shape_ = std::move(o.shape_);
    device_ = o.device_;
  }
  return *this;
}

void Tensor::release() {
  if (data_ == nullptr) return;
  if (device_ == Device::Cuda) {
    cuda_free(data_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
}

}  // namespace mnist_ddp
