// cuda_optim_amp.cu — CudaOps' optimizer and mixed precision (cuda_ops.hpp): SGD, gradient sums,
// --amp's 16-bit copies, and the 16-bit gradient encodings of the compression hooks.
#include "ops/cuda/cuda_ops.hpp"

namespace mnist_ddp {
namespace cuda_ops {

void CudaOps::encode_half(std::size_t n, const float* g, std::uint16_t* h, DType type,
                          float divisor) {
  MNIST_DDP_CHECK(is_half(type), "encode_half: F16 or BF16");
  if (n == 0) return;
  if (type == DType::BF16) {
    launch_encode_half(blocks_for(n), stream_, n, g, reinterpret_cast<__nv_bfloat16*>(h), divisor);
  } else {
    launch_encode_half(blocks_for(n), stream_, n, g, reinterpret_cast<__half*>(h), divisor);
  }
  CUDA_CHECK(cudaGetLastError());
}

void CudaOps::decode_half(std::size_t n, const std::uint16_t* h, float* g, DType type) {
  MNIST_DDP_CHECK(is_half(type), "decode_half: F16 or BF16");
  if (n == 0) return;
  if (type == DType::BF16) {
    launch_from16(blocks_for(n), stream_, n, reinterpret_cast<const __nv_bfloat16*>(h), g);
  } else {
    launch_from16(blocks_for(n), stream_, n, reinterpret_cast<const __half*>(h), g);
  }
  CUDA_CHECK(cudaGetLastError());
}

void CudaOps::add_into(std::size_t n, const float* x, float* y) {
  if (n == 0) return;
  launch_add_into(blocks_for(n), stream_, n, x, y);
  CUDA_CHECK(cudaGetLastError());
}

void CudaOps::zero(std::size_t n, float* y) {
  CUDA_CHECK(cudaMemsetAsync(y, 0, n * sizeof(float), stream_));  // capturable (a memset node)
}

void CudaOps::sgd_step(std::size_t n, float* p, const float* g, float* buf, const SgdParams& s) {
  launch_sgd(blocks_for(n), stream_, n, p, g, buf, 0.f, static_cast<float>(s.momentum),
             static_cast<float>(1.0 - s.dampening), static_cast<float>(s.weight_decay), s.nesterov,
             false, dev_scalars_, skip_step_, skip_step_ != nullptr ? first_pending_ : nullptr);
  CUDA_CHECK(cudaGetLastError());
  if (skip_step_ != nullptr) {
    launch_track_first_update(stream_, dev_scalars_, skip_step_, first_pending_);
    CUDA_CHECK(cudaGetLastError());
  }
}

void CudaOps::set_amp(AmpMode mode, const float* loss_scale, const float* skip_step) {
  amp_ = mode;
  loss_scale_ = loss_scale;
  skip_step_ = skip_step;
}

// SyncBatchNorm: the BN ops exchange their per-channel statistics through `sync` on the host
// (a device-to-host copy and back per BN layer, so such a step is not graph-capturable).
void CudaOps::set_bn_sync(const BnSync* sync) {
  bn_sync_ = sync;
}

// --amp: the 16-bit element type, and fp32 <-> 16-bit copies on the stream.
cudaDataType_t CudaOps::t16() const {
  return amp_ == AmpMode::Bf16 ? CUDA_R_16BF : CUDA_R_16F;
}

void CudaOps::cast_to16(const float* x, void* y, std::size_t n) {
  if (amp_ == AmpMode::Bf16) {
    launch_to16(blocks_for(n), stream_, n, x, static_cast<__nv_bfloat16*>(y));
  } else {
    launch_to16(blocks_for(n), stream_, n, x, static_cast<__half*>(y));
  }
  CUDA_CHECK(cudaGetLastError());
}

void CudaOps::cast_from16(const void* x, float* y, std::size_t n) {
  if (amp_ == AmpMode::Bf16) {
    launch_from16(blocks_for(n), stream_, n, static_cast<const __nv_bfloat16*>(x), y);
  } else {
    launch_from16(blocks_for(n), stream_, n, static_cast<const __half*>(x), y);
  }
  CUDA_CHECK(cudaGetLastError());
}

void* CudaOps::alloc16(std::size_t n) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(1, n) * 2));
  return p;
}

}  // namespace cuda_ops

}  // namespace mnist_ddp
