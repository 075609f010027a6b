// cuda_ops.cu — CudaOps (cuda_ops.hpp): construction and teardown, the fc layer (cuBLAS), the
// loss and top-k, the streams, and make_cuda_ops.
#include "ops/cuda/cuda_ops.hpp"

namespace mnist_ddp {
namespace cuda_ops {

LinearScratch::~LinearScratch() {
  for (void* p : {x, w, dy})
    if (p) cudaFree(p);
}

CudaOps::CudaOps(bool tf32, GpuKernels kernels) : tf32_(tf32), kernels_(kernels) {
  CUDA_CHECK(cudaStreamCreate(&stream_));  // blocking: the legacy stream waits for it
  CUDNN_CHECK(cudnnCreate(&cudnn_));
  CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
  // conv2d_backward's second stream (blocking too, so the legacy-stream copies wait for it as
  // well), with a cuDNN handle of its own bound to it.
  CUDA_CHECK(cudaStreamCreate(&side_));
  CUDNN_CHECK(cudnnCreate(&cudnn_side_));
  CUDNN_CHECK(cudnnSetStream(cudnn_side_, side_));
  CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  CUBLAS_CHECK(cublasCreate(&cublas_));
  // The stream first: cublasSetStream resets the workspace to cuBLAS's own pool, and an explicit
  // workspace keeps cuBLAS from allocating while a step is being captured.
  CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspace));
  CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace));
  // TF32 as PyTorch's default for cuDNN convolutions; off gives full FP32 (parity tests).
  CUBLAS_CHECK(
      cublasSetMathMode(cublas_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
  CUDA_CHECK(cudaMalloc(&scalars_, 64));
  CUDA_CHECK(cudaMalloc(&bn_sums_, 2 * 64 * sizeof(double)));
  CUDA_CHECK(cudaMalloc(&bn_partials_, 2 * kMaxPartials * sizeof(double)));
  CUDA_CHECK(cudaMalloc(&loss_sum_, sizeof(double)));
  CUDA_CHECK(cudaMemset(loss_sum_, 0, sizeof(double)));
  CUDA_CHECK(cudaMalloc(&dev_scalars_, sizeof(DeviceScalars)));
  CUDA_CHECK(cudaMemset(dev_scalars_, 0, sizeof(DeviceScalars)));
  CUDA_CHECK(cudaMalloc(&first_pending_, sizeof(int)));
  CUDA_CHECK(cudaMemset(first_pending_, 0, sizeof(int)));
  CUDA_CHECK(cudaMallocHost(&host_scalars_, kScalarSlots * sizeof(DeviceScalars)));
  for (auto& e : scalar_copied_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

CudaOps::~CudaOps() {
  plans_.clear();
  linear_.clear();
  if (workspace_) cudaFree(workspace_);
  if (side_workspace_) cudaFree(side_workspace_);
  for (void* p : retired_) cudaFree(p);
  for (auto* p : {dev_images_[0], dev_images_[1], dev_labels_[0], dev_labels_[1]})
    if (p) cudaFree(p);
  for (auto* p : dev_order_)
    if (p) cudaFree(p);
  cudaFree(scalars_);
  cudaFree(bn_sums_);
  cudaFree(bn_partials_);
  cudaFree(loss_sum_);
  cudaFree(dev_scalars_);
  cudaFree(first_pending_);
  cudaFreeHost(host_scalars_);
  for (auto e : scalar_copied_) cudaEventDestroy(e);
  cublasDestroy(cublas_);
  cudaFree(cublas_workspace_);
  cudnnDestroy(cudnn_);
  cudnnDestroy(cudnn_side_);
  cudaEventDestroy(fork_);
  cudaEventDestroy(join_);
  cudaStreamDestroy(side_);
  cudaStreamDestroy(stream_);
}

Device CudaOps::device() const {
  return Device::Cuda;
}

void CudaOps::linear_forward(int n, int in, int out, const float* x, const float* w, const float* b,
                             float* y) {
  // Row-major y[N][out] = x[N][in] w[out][in]^T is column-major y^T = w x^T.
  const float one = 1.f, zero = 0.f;
  if (amp_ != AmpMode::Off) {
    // Autocast: 16-bit x[N][in] and w[out][in], fp32 accumulation into the fp32 y.
    LinearScratch& l = linear_scratch(n, in, out);
    cast_to16(x, l.x, static_cast<std::size_t>(n) * in);
    cast_to16(w, l.w, static_cast<std::size_t>(out) * in);
    CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, l.w, t16(), in,
                              l.x, t16(), in, &zero, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  } else {
    CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, in, x, in,
                             &zero, y, out));
  }
  launch_add_row_bias(blocks_for(static_cast<std::size_t>(n) * out), stream_, n, out, b, y);
  CUDA_CHECK(cudaGetLastError());
}

void CudaOps::linear_backward(int n, int in, int out, const float* x, const float* w,
                              const float* dy, float* dx, float* dw, float* db) {
  const float one = 1.f, zero = 0.f;
  if (amp_ != AmpMode::Off) {
    // The same products on 16-bit copies of x, w and dy[N][out], fp32 accumulation and output.
    LinearScratch& l = linear_scratch(n, in, out);
    cast_to16(x, l.x, static_cast<std::size_t>(n) * in);
    cast_to16(w, l.w, static_cast<std::size_t>(out) * in);
    cast_to16(dy, l.dy, static_cast<std::size_t>(n) * out);
    CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, l.x, t16(), in,
                              l.dy, t16(), out, &zero, dw, CUDA_R_32F, in, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
    launch_column_sums(blocks_for(out), stream_, n, out, dy, db);
    CUDA_CHECK(cudaGetLastError());
    if (dx != nullptr) {
      CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, l.w, t16(), in,
                                l.dy, t16(), out, &zero, dx, CUDA_R_32F, in, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
    }
    return;
  }
  // dw[out][in] = dy^T x: column-major dw^T (in x out) = x^T (in x N) * dy (N x out).
  CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x, in, dy, out,
                           &zero, dw, in));
  launch_column_sums(blocks_for(out), stream_, n, out, dy, db);
  CUDA_CHECK(cudaGetLastError());
  // dx[N][in] = dy w: column-major dx^T (in x N) = w^T (in x out) * dy^T (out x N).
  if (dx != nullptr) {
    CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w, in, dy, out,
                             &zero, dx, in));
  }
}

double CudaOps::softmax_cross_entropy(int n, int classes, const float* logits,
                                      const std::int32_t* labels, float* dlogits,
                                      double grad_scale) {
  run_xent(n, classes, logits, labels, dlogits, grad_scale);
  double loss = 0;
  CUDA_CHECK(cudaMemcpy(&loss, scalars_, sizeof loss, cudaMemcpyDeviceToHost));
  return loss;
}

int CudaOps::topk_correct(int n, int classes, const float* logits, const std::int32_t* labels,
                          int k) {
  MNIST_DDP_CHECK(k == 1 || k == 5, "top-k for k = 1 or 5");
  run_xent(n, classes, logits, labels, nullptr, 1.0);
  int counts[2] = {0, 0};
  CUDA_CHECK(cudaMemcpy(counts, reinterpret_cast<char*>(scalars_) + 8, sizeof counts,
                        cudaMemcpyDeviceToHost));
  return k == 1 ? counts[0] : counts[1];
}

void CudaOps::to_fc_rows(int c, int n, int hw, const float* x, float* y) {
  // NCHW already is PyTorch's flatten order.
  CUDA_CHECK(cudaMemcpyAsync(y, x, sizeof(float) * c * n * hw, cudaMemcpyDeviceToDevice, stream_));
}

void CudaOps::from_fc_rows(int c, int n, int hw, const float* x, float* y) {
  CUDA_CHECK(cudaMemcpyAsync(y, x, sizeof(float) * c * n * hw, cudaMemcpyDeviceToDevice, stream_));
}

void CudaOps::accumulate_loss(int n, int classes, const float* logits, const std::int32_t* labels,
                              float* dlogits, double grad_scale) {
  launch_softmax_xent(blocks_for(n), stream_, n, classes, logits, labels, dlogits, grad_scale,
                      loss_sum_, xent_counts_scratch(), xent_counts_scratch() + 1, loss_scale_);
  CUDA_CHECK(cudaGetLastError());
}

double CudaOps::take_loss_sum() {
  double s = 0;
  // Sync: the legacy-stream copy waits for every step queued on the ops' stream.
  CUDA_CHECK(cudaMemcpy(&s, loss_sum_, sizeof s, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemsetAsync(loss_sum_, 0, sizeof(double), stream_));
  return s;
}

void* CudaOps::stream() const {
  return stream_;
}

std::unique_ptr<StampClock> CudaOps::make_stamp_clock() {
  return make_device_stamp_clock(stream_);
}

LinearScratch& CudaOps::linear_scratch(int n, int in, int out) {
  const auto key = std::make_tuple(n, in, out, static_cast<int>(amp_));
  auto it = linear_.find(key);
  if (it != linear_.end()) return *it->second;
  // Allocated on a size's first (eager) step, before any capture of it.
  auto l = std::make_unique<LinearScratch>();
  l->x = alloc16(static_cast<std::size_t>(n) * in);
  l->w = alloc16(static_cast<std::size_t>(out) * in);
  l->dy = alloc16(static_cast<std::size_t>(n) * out);
  return *linear_.emplace(key, std::move(l)).first->second;
}

// Top-k counters the training loss kernel writes and nobody reads.
int* CudaOps::xent_counts_scratch() {
  return reinterpret_cast<int*>(static_cast<char*>(scalars_) + 16);
}

void CudaOps::run_xent(int n, int classes, const float* logits, const std::int32_t* labels,
                       float* dlogits, double grad_scale) {
  CUDA_CHECK(cudaMemsetAsync(scalars_, 0, 16, stream_));
  auto* loss = reinterpret_cast<double*>(scalars_);
  auto* counts = reinterpret_cast<int*>(reinterpret_cast<char*>(scalars_) + 8);
  launch_softmax_xent(blocks_for(n), stream_, n, classes, logits, labels, dlogits, grad_scale, loss,
                      counts, counts + 1, nullptr);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda_ops

std::unique_ptr<Ops> make_cuda_ops(const BackendOptions& options) {
  return std::make_unique<cuda_ops::CudaOps>(options.tf32, options.gpu_kernels);
}

}  // namespace mnist_ddp
