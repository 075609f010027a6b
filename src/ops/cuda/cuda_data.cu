// cuda_data.cu — CudaOps' memory and data (cuda_ops.hpp): allocation, uploads and downloads, the
// device-resident dataset, the batch gather, and the per-step scalars staged through pinned
// memory.
#include "ops/cuda/cuda_ops.hpp"

namespace mnist_ddp {
namespace cuda_ops {

void CudaOps::set_step_scalars(const StepScalars& s) {
  // A ring of pinned slots: a slot is rewritten only after the copy that last read it ran
  // (normally long ago), so the host never races a copy still queued on the stream.
  const int slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % kScalarSlots;
  // Sync (normally a no-op): the copy that last read this slot has run.
  CUDA_CHECK(cudaEventSynchronize(scalar_copied_[slot]));
  host_scalars_[slot] = DeviceScalars{s.offset, static_cast<float>(s.lr), s.first_step ? 1 : 0};
  CUDA_CHECK(cudaMemcpyAsync(dev_scalars_, &host_scalars_[slot], sizeof(DeviceScalars),
                             cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(scalar_copied_[slot], stream_));
  step_offset_ = s.offset;
}

void CudaOps::gather_at_step(int slot, int n, float mean, float std, float* x, std::int32_t* y) {
  launch_gather(slot, step_offset_, n, mean, std, x, y, dev_scalars_);
}

std::uint8_t* CudaOps::alloc_bytes(std::size_t n) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, n > 0 ? n : 1));
  return static_cast<std::uint8_t*>(p);
}

void CudaOps::free_bytes(std::uint8_t* p) {
  if (p != nullptr) CUDA_CHECK(cudaFree(p));
}

void CudaOps::upload(const void* host, void* backend, std::size_t bytes) {
  fused_ = {};  // the upload may overwrite a direct convolution's output
  if (bytes > 0) CUDA_CHECK(cudaMemcpy(backend, host, bytes, cudaMemcpyHostToDevice));
}

void CudaOps::download(const void* backend, void* host, std::size_t bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMemcpy(host, backend, bytes, cudaMemcpyDeviceToHost));
}

void CudaOps::load_dataset(int slot, const Dataset& d) {
  // Once per run: the whole split lives on the GPU (47 MB for MNIST's training set).
  MNIST_DDP_CHECK(slot == kTrainSplit || slot == kEvalSplit, "dataset slot");
  // The order buffer is sized for the whole split now and never moves, so a captured gather
  // keeps pointing at it (a rank's order never holds more indices than the split has).
  CUDA_CHECK(cudaMalloc(&dev_order_[slot], std::max<std::size_t>(1, d.count) * 8));
  order_capacity_[slot] = static_cast<std::size_t>(d.count);
  CUDA_CHECK(cudaMalloc(&dev_images_[slot], d.images.size()));
  CUDA_CHECK(cudaMalloc(&dev_labels_[slot], d.labels.size()));
  CUDA_CHECK(
      cudaMemcpy(dev_images_[slot], d.images.data(), d.images.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(
      cudaMemcpy(dev_labels_[slot], d.labels.data(), d.labels.size(), cudaMemcpyHostToDevice));
}

void CudaOps::set_order(int slot, std::span<const std::int64_t> order) {
  MNIST_DDP_CHECK(dev_order_[slot] != nullptr, "set_order before load_dataset");
  MNIST_DDP_CHECK(order.size() <= order_capacity_[slot], "a visiting order longer than the split");
  order_size_[slot] = order.size();
  if (!order.empty()) {
    CUDA_CHECK(
        cudaMemcpy(dev_order_[slot], order.data(), order.size_bytes(), cudaMemcpyHostToDevice));
  }
}

void CudaOps::gather(int slot, std::int64_t offset, int n, float mean, float std, float* x,
                     std::int32_t* y) {
  launch_gather(slot, offset, n, mean, std, x, y, nullptr);
}

// offset is checked on the host; with at != nullptr the kernel reads it from device memory.
void CudaOps::launch_gather(int slot, std::int64_t offset, int n, float mean, float std, float* x,
                            std::int32_t* y, const DeviceScalars* at) {
  MNIST_DDP_CHECK(dev_images_[slot] != nullptr, "gather before load_dataset");
  MNIST_DDP_CHECK(offset >= 0 && offset + n <= static_cast<std::int64_t>(order_size_[slot]),
                  "gather outside the visiting order");
  const float a = 1.0f / (255.0f * std), c = -mean / std;
  launch_gather_batch(blocks_for(static_cast<std::size_t>(n) * kImagePixels), stream_,
                      dev_images_[slot], dev_labels_[slot], dev_order_[slot], offset, n, a, c, x, y,
                      at);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda_ops

}  // namespace mnist_ddp
