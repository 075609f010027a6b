// tensor.hpp — a small owning float32 buffer with a shape and a device tag. Move-only. CPU memory
// is 64-byte aligned (SIMD-friendly); CUDA memory comes from the backend through device.hpp.
#pragma once

#include <cstddef>
#include <vector>

#include "mnist_ddp/launch/device.hpp"

namespace mnist_ddp {

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::vector<int> shape, Device device);
  ~Tensor();
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  std::size_t numel() const { return numel_; }
  const std::vector<int>& shape() const { return shape_; }
  Device device() const { return device_; }

 private:
  void release();
  float* data_ = nullptr;
  std::size_t numel_ = 0;
  std::vector<int> shape_;
  Device device_ = Device::Cpu;
};

}  // namespace mnist_ddp
