// cuda_ops.cu — CudaOps: the Ops interface on one GPU. cuDNN (v9 legacy API) for the
// convolutions with the algorithm chosen once per shape (cudnnGet*Algorithm_v7) and one explicit,
// growing workspace, except fp32 layer1 (one input channel: direct_conv.cuh's kernels); cuBLAS for
// the fc layer; own kernels (kernels.cu, launched through kernels.cuh) for BN statistics, the fused
// BN->ReLU->maxpool forward/backward, softmax cross-entropy with top-1/top-5, SGD, and the batch
// gather/normalise from the device-resident dataset. Activations are plain NCHW (so the flatten
// before fc is a copy). Semantics are the CPU reference's (cpu_kernels.hpp).
//
// Ordering: every op runs on one blocking stream (stream()), so a whole training step can be
// captured into a CUDA graph (step_graph.hpp); conv2d_backward alone forks layer2's filter
// gradient onto a second blocking stream and joins it by events before returning (a parallel
// branch of the captured graph, never work left in flight). The synchronous cudaMemcpy of
// upload/download/loss run on the legacy default stream, which waits for that stream's work.
// NcclComm joins this stream with events (Comm::bind_stream). The values that change per step
// (batch offset, lr) are copied into device memory before the step (set_step_scalars), and the
// training loss is summed on the device, so nothing inside a step needs the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/runtime/check.hpp"
#include "ops/cuda/device_stamps.hpp"
#include "ops/cuda/direct_conv.cuh"
#include "ops/cuda/kernels.cuh"
#include "runtime/cuda/cuda_check.hpp"

namespace mnist_ddp {
namespace {

using namespace kernels;  // the kernels' launchers, kThreads, blocks_for, DeviceScalars

// ---- cuDNN convolution plans ------------------------------------------------------------------

// The choice from a cuDNN heuristics list (best first): only entries whose status is success and
// whose math type the run allows (full FP32 with --tf32 off: FMA math only, as PyTorch asserts),
// the first deterministic one of those (a run is bitwise reproducible, and graph replay provably
// equals eager launches), else the first of those; nullptr when none is usable.
template <typename Perf>
const Perf* pick_algorithm(const Perf* perf, int found, bool fma_only) {
  const auto usable = [&](const Perf& p) {
    return p.status == CUDNN_STATUS_SUCCESS && (!fma_only || p.mathType == CUDNN_FMA_MATH);
  };
  for (int i = 0; i < found; ++i) {
    if (usable(perf[i]) && perf[i].determinism == CUDNN_DETERMINISTIC) return &perf[i];
  }
  for (int i = 0; i < found; ++i) {
    if (usable(perf[i])) return &perf[i];
  }
  return nullptr;
}

// fp32 data: an algorithm measured faster than the heuristics' pick for this model's small
// convolutions, taken when the heuristics list it as usable and deterministic; otherwise (and for
// 16-bit data) pick_algorithm's choice. A fixed preference, not a timing at start-up, so every run
// and every rank runs the same kernels (bitwise reproducible; resume and graphs-vs-eager stay
// exact). Measured on an H100, batch 100 (bench/gpu_conv_algos.cu;
// bench/results/2026-11-27-gpu-direct-conv.md): layer2 forward IMPLICIT_GEMM 36 us against the
// heuristics' IMPLICIT_PRECOMP_GEMM 82 us; weight gradient FFT 45 us (42 MiB of workspace)
// against the heuristics' ALGO_1 54 us.
template <typename Perf, typename Algo>
const Perf* pick_preferred(const Perf* perf, int found, bool fma_only, bool fp32, Algo preferred) {
  if (fp32) {
    for (int i = 0; i < found; ++i) {
      if (perf[i].algo == preferred && perf[i].status == CUDNN_STATUS_SUCCESS &&
          perf[i].determinism == CUDNN_DETERMINISTIC &&
          (!fma_only || perf[i].mathType == CUDNN_FMA_MATH))
        return &perf[i];
    }
  }
  return pick_algorithm(perf, found, fma_only);
}

// One convolution shape in one precision. x/y/w describe the data cuDNN reads and writes (fp32,
// or the 16-bit copies under --amp); yf is the fp32 output the bias is added to and taken from.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, yf = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  // One convolution descriptor per direction: each carries the math type cuDNN returned with
  // that direction's algorithm (cuDNN needs algorithm and math type together, as PyTorch sets).
  cudnnConvolutionDescriptor_t conv = nullptr, conv_bwd_data = nullptr, conv_bwd_filter = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  bool has_bwd_data = false;  // chosen on first use: layer 1 never computes its input gradient
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  std::size_t bwd_filter_bytes = 0;  // cuDNN's workspace need for bwd_filter (conv2d_backward's)
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;   // of x, y and w
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // asked of the heuristics
  // --amp: 16-bit copies, owned by the plan so their addresses never change (graph replay).
  bool half = false;
  std::size_t x_elems = 0, y_elems = 0, w_elems = 0;
  void *hx = nullptr, *hdx = nullptr, *hy = nullptr, *hdy = nullptr, *hw = nullptr, *hdw = nullptr;
  // fp32 layer1 (one input channel): forward and weight gradient by the direct kernels
  // (direct_conv.cuh) instead of cuDNN; wgrad_partials is their split reduction's scratch.
  bool direct = false;
  float* wgrad_partials = nullptr;
  double* fwd_moments = nullptr;  // [2 * K * N]: the forward's BN partial moments of y
  ~ConvPlan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (yf) cudnnDestroyTensorDescriptor(yf);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (w) cudnnDestroyFilterDescriptor(w);
    for (auto d : {conv, conv_bwd_data, conv_bwd_filter})
      if (d) cudnnDestroyConvolutionDescriptor(d);
    for (void* p : {hx, hdx, hy, hdy, hw, hdw})
      if (p) cudaFree(p);
    if (wgrad_partials) cudaFree(wgrad_partials);
    if (fwd_moments) cudaFree(fwd_moments);
  }
};

// --amp: the fc layer's 16-bit copies for one (n, in, out), owned like ConvPlan's.
struct LinearScratch {
  void *x = nullptr, *w = nullptr, *dy = nullptr;
  ~LinearScratch() {
    for (void* p : {x, w, dy})
      if (p) cudaFree(p);
  }
};

class CudaOps final : public Ops {
 public:
  explicit CudaOps(bool tf32) : tf32_(tf32) {
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
  ~CudaOps() override {
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
  Device device() const override { return Device::Cuda; }

  void conv2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b,
                      float* y) override {
    ConvPlan& p = plan(g);
    if (p.direct) {  // the bias is added in the kernel, and y's BN partial moments computed
      launch_direct_conv_fwd(stream_, g.n, g.k, g.h, g.w, g.r, g.pad, x, w, b, y, p.fwd_moments);
      CUDA_CHECK(cudaGetLastError());
      fused_ = FusedMoments{y, p.fwd_moments, g.k, g.n, g.out_h() * g.out_w()};
      return;
    }
    fused_ = {};
    const float one = 1.f, zero = 0.f;
    if (p.half) {
      // Autocast: 16-bit input and weights, fp32 accumulation, the output rounded to 16 bits.
      cast_to16(x, p.hx, p.x_elems);
      cast_to16(w, p.hw, p.w_elems);
      CUDNN_CHECK(cudnnConvolutionForward(cudnn_, &one, p.x, p.hx, p.w, p.hw, p.conv, p.fwd,
                                          workspace_, workspace_bytes_, &zero, p.y, p.hy));
      cast_from16(p.hy, y, p.y_elems);
    } else {
      CUDNN_CHECK(cudnnConvolutionForward(cudnn_, &one, p.x, x, p.w, w, p.conv, p.fwd, workspace_,
                                          workspace_bytes_, &zero, p.y, y));
    }
    CUDNN_CHECK(cudnnAddTensor(cudnn_, &one, p.bias, b, &one, p.yf, y));
  }
  void conv2d_backward_filter(const ConvGeom& g, const float* x, const float* dy, float* dw,
                              float* db) override {
    ConvPlan& p = plan(g);
    if (p.direct) {  // dw and db, both overwritten
      launch_direct_conv_wgrad(stream_, g.n, g.k, g.h, g.w, g.r, g.pad, x, dy, p.wgrad_partials, dw,
                               db);
      CUDA_CHECK(cudaGetLastError());
      return;
    }
    filter_gradient(p, cudnn_, workspace_, workspace_bytes_, x, dy, dw, db);
  }
  // Both gradients of layer2 at once: the filter gradient on side_ while the data gradient runs on
  // stream_ (each alone fills a fraction of the GPU at batch 100). The direct kernels (layer1)
  // and --amp's 16-bit copies (both directions share the 16-bit dy) keep them in turn.
  void conv2d_backward(const ConvGeom& g, const float* x, const float* w, const float* dy,
                       float* dw, float* db, float* dx) override {
    ConvPlan& p = plan(g);
    if (dx == nullptr || p.direct || p.half) {
      conv2d_backward_filter(g, x, dy, dw, db);
      if (dx != nullptr) conv2d_backward_data(g, w, dy, dx);
      return;
    }
    if (!p.has_bwd_data) choose_backward_data(g, p);  // first use: an eager step, never captured
    // The side stream's own workspace (the main one is the data gradient's meanwhile), grown on
    // first use, which is an eager step: a captured graph never sees it grow.
    if (p.bwd_filter_bytes > side_workspace_bytes_) {
      if (side_workspace_) retired_.push_back(side_workspace_);
      CUDA_CHECK(cudaMalloc(&side_workspace_, p.bwd_filter_bytes));
      side_workspace_bytes_ = p.bwd_filter_bytes;
    }
    // Fork: side_ waits for everything queued on stream_ so far (dy and x are written there).
    // While capturing, this event pulls side_ into the same graph as a parallel branch.
    CUDA_CHECK(cudaEventRecord(fork_, stream_));
    CUDA_CHECK(cudaStreamWaitEvent(side_, fork_, 0));
    filter_gradient(p, cudnn_side_, side_workspace_, side_workspace_bytes_, x, dy, dw, db);
    CUDA_CHECK(cudaEventRecord(join_, side_));
    data_gradient(p, w, dy, dx);
    // Join: whatever follows on stream_ (the gradient bucket's all-reduce, the next layer's
    // backward, the end of a capture) waits for dw and db.
    CUDA_CHECK(cudaStreamWaitEvent(stream_, join_, 0));
  }
  // cuDNN's filter and bias gradients of a non-direct plan on `handle` with its workspace.
  void filter_gradient(ConvPlan& p, cudnnHandle_t handle, void* workspace, std::size_t ws_bytes,
                       const float* x, const float* dy, float* dw, float* db) {
    const float one = 1.f, zero = 0.f;
    if (p.half) {
      // The weight gradient is produced in 16 bits (an fp16 overflow becomes inf: the scaler
      // skips the step) and widened into the fp32 gradient arena.
      cast_to16(x, p.hx, p.x_elems);
      cast_to16(dy, p.hdy, p.y_elems);
      CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, p.x, p.hx, p.y, p.hdy,
                                                 p.conv_bwd_filter, p.bwd_filter, workspace,
                                                 ws_bytes, &zero, p.w, p.hdw));
      cast_from16(p.hdw, dw, p.w_elems);
    } else {
      CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, p.x, x, p.y, dy, p.conv_bwd_filter,
                                                 p.bwd_filter, workspace, ws_bytes, &zero, p.w,
                                                 dw));
    }
    CUDNN_CHECK(cudnnConvolutionBackwardBias(handle, &one, p.yf, dy, &zero, p.bias, db));
  }
  void conv2d_backward_data(const ConvGeom& g, const float* w, const float* dy,
                            float* dx) override {
    ConvPlan& p = plan(g);
    if (!p.has_bwd_data) choose_backward_data(g, p);  // first use: an eager step, never captured
    data_gradient(p, w, dy, dx);
  }
  // cuDNN's data gradient of a plan whose algorithm is chosen, on stream_.
  void data_gradient(ConvPlan& p, const float* w, const float* dy, float* dx) {
    const float one = 1.f, zero = 0.f;
    if (p.half) {
      cast_to16(w, p.hw, p.w_elems);
      cast_to16(dy, p.hdy, p.y_elems);
      CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn_, &one, p.w, p.hw, p.y, p.hdy, p.conv_bwd_data,
                                               p.bwd_data, workspace_, workspace_bytes_, &zero, p.x,
                                               p.hdx));
      cast_from16(p.hdx, dx, p.x_elems);
    } else {
      CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn_, &one, p.w, w, p.y, dy, p.conv_bwd_data,
                                               p.bwd_data, workspace_, workspace_bytes_, &zero, p.x,
                                               dx));
    }
  }
  void batchnorm_stats(int c, int n, int hw, const float* x, double eps, double momentum,
                       float* save_mean, float* save_invstd, float* running_mean,
                       float* running_var) override {
    MNIST_DDP_CHECK(c >= 1 && c <= 64, "more channels than the BN scratch holds");
    const long m = static_cast<long>(n) * hw;
    int split = reduce_split(c, m);
    const double* partials = bn_partials_;
    if (fused_.y == x && fused_.c == c && fused_.n == n && fused_.hw == hw) {
      // x is the direct convolution's output, which already wrote its partial moments (one per
      // channel and image; the same stream, so they are complete when the moments kernel runs).
      split = n;
      partials = fused_.moments;
    } else {
      MNIST_DDP_CHECK(c * split <= kMaxPartials, "BN reduction split larger than its scratch");
      launch_bn_partial_moments(dim3(split, c), stream_, c, n, hw, x, bn_partials_);
      CUDA_CHECK(cudaGetLastError());
    }
    fused_ = {};
    // Without SyncBatchNorm the statistics come straight from the partials; with it, this rank's
    // moments go to bn_sums_ for the host exchange.
    launch_bn_moments(blocks_for(c), stream_, c, split, partials, static_cast<double>(m), eps,
                      momentum, bn_sync_ == nullptr ? nullptr : bn_sums_, save_mean, save_invstd,
                      running_mean, running_var);
    CUDA_CHECK(cudaGetLastError());
    if (bn_sync_ == nullptr) return;
    // SyncBatchNorm forward: this rank's moments, combined with every rank's on the host (the
    // BnSync exchange: a few doubles per channel), then the statistics of the union batch.
    std::vector<double> moments(2 * static_cast<std::size_t>(c)), mean(c), var(c);
    // Sync: the legacy-stream copy waits for the moments kernel on the ops' stream.
    CUDA_CHECK(cudaMemcpy(moments.data(), bn_sums_, moments.size() * sizeof(double),
                          cudaMemcpyDeviceToHost));
    for (int ch = 0; ch < c; ++ch) {
      mean[ch] = moments[2 * ch];
      var[ch] = moments[2 * ch + 1];
    }
    double md = static_cast<double>(n) * hw;
    bn_sync_->stats(c, mean.data(), var.data(), &md);
    for (int ch = 0; ch < c; ++ch) {
      moments[2 * ch] = mean[ch];
      moments[2 * ch + 1] = var[ch];
    }
    CUDA_CHECK(cudaMemcpy(bn_sums_, moments.data(), moments.size() * sizeof(double),
                          cudaMemcpyHostToDevice));
    launch_bn_finalize(blocks_for(c), stream_, c, bn_sums_, md, eps, momentum, save_mean,
                       save_invstd, running_mean, running_var);
    CUDA_CHECK(cudaGetLastError());
  }
  void batchnorm_eval_stats(int c, const float* running_mean, const float* running_var, double eps,
                            float* mean, float* invstd) override {
    launch_bn_eval_stats(blocks_for(c), stream_, c, running_mean, running_var, eps, mean, invstd);
    CUDA_CHECK(cudaGetLastError());
  }
  void bn_relu_pool_forward(int c, int n, int h, int w, const float* x, const float* gamma,
                            const float* beta, const float* mean, const float* invstd, float* y,
                            std::uint8_t* argmax) override {
    const std::size_t total = static_cast<std::size_t>(n) * c * (h / 2) * (w / 2);
    launch_bn_relu_pool_fwd(blocks_for(total), stream_, c, n, h, w, x, gamma, beta, mean, invstd, y,
                            argmax);
    CUDA_CHECK(cudaGetLastError());
  }
  void bn_relu_pool_backward(int c, int n, int h, int w, const float* x, const float* y,
                             const float* dy, const std::uint8_t* argmax, const float* gamma,
                             const float* mean, const float* invstd, bool batch_stats, float* dx,
                             float* dgamma, float* dbeta) override {
    MNIST_DDP_CHECK(c >= 1 && c <= 64, "more channels than the BN scratch holds");
    const int split = reduce_split(c, static_cast<long>(n) * (h / 2) * (w / 2));
    MNIST_DDP_CHECK(c * split <= kMaxPartials, "BN reduction split larger than its scratch");
    launch_bn_relu_pool_partials(dim3(split, c), stream_, c, n, h, w, x, y, dy, argmax, mean,
                                 bn_partials_);
    CUDA_CHECK(cudaGetLastError());
    launch_bn_grad_sums(blocks_for(c), stream_, c, split, bn_partials_, invstd, bn_sums_, dgamma,
                        dbeta);
    CUDA_CHECK(cudaGetLastError());
    double md = static_cast<double>(n) * h * w;
    if (bn_sync_ != nullptr && batch_stats) {
      // SyncBatchNorm backward: [sum dy, sum dy (x - mean)] summed over ranks on the host
      // (dgamma/dbeta stay this rank's: DDP averages them like every gradient).
      std::vector<double> sums(2 * static_cast<std::size_t>(c));
      // Sync: the legacy-stream copy waits for the sums kernel on the ops' stream.
      CUDA_CHECK(
          cudaMemcpy(sums.data(), bn_sums_, sums.size() * sizeof(double), cudaMemcpyDeviceToHost));
      bn_sync_->grad_sums(c, sums.data(), &md);
      CUDA_CHECK(
          cudaMemcpy(bn_sums_, sums.data(), sums.size() * sizeof(double), cudaMemcpyHostToDevice));
    }
    const std::size_t total = static_cast<std::size_t>(n) * c * (h / 2) * (w / 2);
    launch_bn_relu_pool_dx(blocks_for(total), stream_, c, n, h, w, x, y, dy, argmax, gamma, mean,
                           invstd, bn_sums_, md, batch_stats, dx);
    CUDA_CHECK(cudaGetLastError());
  }
  void linear_forward(int n, int in, int out, const float* x, const float* w, const float* b,
                      float* y) override {
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
  void linear_backward(int n, int in, int out, const float* x, const float* w, const float* dy,
                       float* dx, float* dw, float* db) override {
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
        CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, l.w, t16(),
                                  in, l.dy, t16(), out, &zero, dx, CUDA_R_32F, in,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
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
  double softmax_cross_entropy(int n, int classes, const float* logits, const std::int32_t* labels,
                               float* dlogits, double grad_scale) override {
    run_xent(n, classes, logits, labels, dlogits, grad_scale);
    double loss = 0;
    CUDA_CHECK(cudaMemcpy(&loss, scalars_, sizeof loss, cudaMemcpyDeviceToHost));
    return loss;
  }
  int topk_correct(int n, int classes, const float* logits, const std::int32_t* labels,
                   int k) override {
    MNIST_DDP_CHECK(k == 1 || k == 5, "top-k for k = 1 or 5");
    run_xent(n, classes, logits, labels, nullptr, 1.0);
    int counts[2] = {0, 0};
    CUDA_CHECK(cudaMemcpy(counts, reinterpret_cast<char*>(scalars_) + 8, sizeof counts,
                          cudaMemcpyDeviceToHost));
    return k == 1 ? counts[0] : counts[1];
  }
  void to_fc_rows(int c, int n, int hw, const float* x, float* y) override {
    // NCHW already is PyTorch's flatten order.
    CUDA_CHECK(
        cudaMemcpyAsync(y, x, sizeof(float) * c * n * hw, cudaMemcpyDeviceToDevice, stream_));
  }
  void from_fc_rows(int c, int n, int hw, const float* x, float* y) override {
    CUDA_CHECK(
        cudaMemcpyAsync(y, x, sizeof(float) * c * n * hw, cudaMemcpyDeviceToDevice, stream_));
  }
  void encode_half(std::size_t n, const float* g, std::uint16_t* h, DType type,
                   float divisor) override {
    MNIST_DDP_CHECK(is_half(type), "encode_half: F16 or BF16");
    if (n == 0) return;
    if (type == DType::BF16) {
      launch_encode_half(blocks_for(n), stream_, n, g, reinterpret_cast<__nv_bfloat16*>(h),
                         divisor);
    } else {
      launch_encode_half(blocks_for(n), stream_, n, g, reinterpret_cast<__half*>(h), divisor);
    }
    CUDA_CHECK(cudaGetLastError());
  }
  void decode_half(std::size_t n, const std::uint16_t* h, float* g, DType type) override {
    MNIST_DDP_CHECK(is_half(type), "decode_half: F16 or BF16");
    if (n == 0) return;
    if (type == DType::BF16) {
      launch_from16(blocks_for(n), stream_, n, reinterpret_cast<const __nv_bfloat16*>(h), g);
    } else {
      launch_from16(blocks_for(n), stream_, n, reinterpret_cast<const __half*>(h), g);
    }
    CUDA_CHECK(cudaGetLastError());
  }
  void add_into(std::size_t n, const float* x, float* y) override {
    if (n == 0) return;
    launch_add_into(blocks_for(n), stream_, n, x, y);
    CUDA_CHECK(cudaGetLastError());
  }
  void zero(std::size_t n, float* y) override {
    CUDA_CHECK(cudaMemsetAsync(y, 0, n * sizeof(float), stream_));  // capturable (a memset node)
  }
  void sgd_step(std::size_t n, float* p, const float* g, float* buf, const SgdParams& s) override {
    launch_sgd(blocks_for(n), stream_, n, p, g, buf, 0.f, static_cast<float>(s.momentum),
               static_cast<float>(1.0 - s.dampening), static_cast<float>(s.weight_decay),
               s.nesterov, false, dev_scalars_, skip_step_,
               skip_step_ != nullptr ? first_pending_ : nullptr);
    CUDA_CHECK(cudaGetLastError());
    if (skip_step_ != nullptr) {
      launch_track_first_update(stream_, dev_scalars_, skip_step_, first_pending_);
      CUDA_CHECK(cudaGetLastError());
    }
  }
  void set_step_scalars(const StepScalars& s) override {
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
  void gather_at_step(int slot, int n, float mean, float std, float* x, std::int32_t* y) override {
    launch_gather(slot, step_offset_, n, mean, std, x, y, dev_scalars_);
  }
  void accumulate_loss(int n, int classes, const float* logits, const std::int32_t* labels,
                       float* dlogits, double grad_scale) override {
    launch_softmax_xent(blocks_for(n), stream_, n, classes, logits, labels, dlogits, grad_scale,
                        loss_sum_, xent_counts_scratch(), xent_counts_scratch() + 1, loss_scale_);
    CUDA_CHECK(cudaGetLastError());
  }
  double take_loss_sum() override {
    double s = 0;
    // Sync: the legacy-stream copy waits for every step queued on the ops' stream.
    CUDA_CHECK(cudaMemcpy(&s, loss_sum_, sizeof s, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemsetAsync(loss_sum_, 0, sizeof(double), stream_));
    return s;
  }
  void* stream() const override { return stream_; }
  std::unique_ptr<StampClock> make_stamp_clock() override {
    return make_device_stamp_clock(stream_);
  }
  void set_amp(AmpMode mode, const float* loss_scale, const float* skip_step) override {
    amp_ = mode;
    loss_scale_ = loss_scale;
    skip_step_ = skip_step;
  }
  // SyncBatchNorm: the BN ops exchange their per-channel statistics through `sync` on the host
  // (a device-to-host copy and back per BN layer, so such a step is not graph-capturable).
  void set_bn_sync(const BnSync* sync) override { bn_sync_ = sync; }
  std::uint8_t* alloc_bytes(std::size_t n) override {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, n > 0 ? n : 1));
    return static_cast<std::uint8_t*>(p);
  }
  void free_bytes(std::uint8_t* p) override {
    if (p != nullptr) CUDA_CHECK(cudaFree(p));
  }
  void upload(const void* host, void* backend, std::size_t bytes) override {
    fused_ = {};  // the upload may overwrite a direct convolution's output
    if (bytes > 0) CUDA_CHECK(cudaMemcpy(backend, host, bytes, cudaMemcpyHostToDevice));
  }
  void download(const void* backend, void* host, std::size_t bytes) override {
    if (bytes > 0) CUDA_CHECK(cudaMemcpy(host, backend, bytes, cudaMemcpyDeviceToHost));
  }
  void load_dataset(int slot, const Dataset& d) override {
    // Once per run: the whole split lives on the GPU (47 MB for MNIST's training set).
    MNIST_DDP_CHECK(slot == kTrain || slot == kTest, "dataset slot");
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
  void set_order(int slot, std::span<const std::int64_t> order) override {
    MNIST_DDP_CHECK(dev_order_[slot] != nullptr, "set_order before load_dataset");
    MNIST_DDP_CHECK(order.size() <= order_capacity_[slot],
                    "a visiting order longer than the split");
    order_size_[slot] = order.size();
    if (!order.empty()) {
      CUDA_CHECK(
          cudaMemcpy(dev_order_[slot], order.data(), order.size_bytes(), cudaMemcpyHostToDevice));
    }
  }
  void gather(int slot, std::int64_t offset, int n, float mean, float std, float* x,
              std::int32_t* y) override {
    launch_gather(slot, offset, n, mean, std, x, y, nullptr);
  }

 private:
  static constexpr std::size_t kCublasWorkspace = 32u << 20;  // cuBLAS's advice for Hopper
  static constexpr int kScalarSlots = 4;

  // offset is checked on the host; with at != nullptr the kernel reads it from device memory.
  void launch_gather(int slot, std::int64_t offset, int n, float mean, float std, float* x,
                     std::int32_t* y, const DeviceScalars* at) {
    MNIST_DDP_CHECK(dev_images_[slot] != nullptr, "gather before load_dataset");
    MNIST_DDP_CHECK(offset >= 0 && offset + n <= static_cast<std::int64_t>(order_size_[slot]),
                    "gather outside the visiting order");
    const float a = 1.0f / (255.0f * std), c = -mean / std;
    launch_gather_batch(blocks_for(static_cast<std::size_t>(n) * kImagePixels), stream_,
                        dev_images_[slot], dev_labels_[slot], dev_order_[slot], offset, n, a, c, x,
                        y, at);
    CUDA_CHECK(cudaGetLastError());
  }
  // --amp: the 16-bit element type, and fp32 <-> 16-bit copies on the stream.
  cudaDataType_t t16() const { return amp_ == AmpMode::Bf16 ? CUDA_R_16BF : CUDA_R_16F; }
  void cast_to16(const float* x, void* y, std::size_t n) {
    if (amp_ == AmpMode::Bf16) {
      launch_to16(blocks_for(n), stream_, n, x, static_cast<__nv_bfloat16*>(y));
    } else {
      launch_to16(blocks_for(n), stream_, n, x, static_cast<__half*>(y));
    }
    CUDA_CHECK(cudaGetLastError());
  }
  void cast_from16(const void* x, float* y, std::size_t n) {
    if (amp_ == AmpMode::Bf16) {
      launch_from16(blocks_for(n), stream_, n, static_cast<const __nv_bfloat16*>(x), y);
    } else {
      launch_from16(blocks_for(n), stream_, n, static_cast<const __half*>(x), y);
    }
    CUDA_CHECK(cudaGetLastError());
  }
  void* alloc16(std::size_t n) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(1, n) * 2));
    return p;
  }
  LinearScratch& linear_scratch(int n, int in, int out) {
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
  int* xent_counts_scratch() { return reinterpret_cast<int*>(static_cast<char*>(scalars_) + 16); }

  void run_xent(int n, int classes, const float* logits, const std::int32_t* labels, float* dlogits,
                double grad_scale) {
    CUDA_CHECK(cudaMemsetAsync(scalars_, 0, 16, stream_));
    auto* loss = reinterpret_cast<double*>(scalars_);
    auto* counts = reinterpret_cast<int*>(reinterpret_cast<char*>(scalars_) + 8);
    launch_softmax_xent(blocks_for(n), stream_, n, classes, logits, labels, dlogits, grad_scale,
                        loss, counts, counts + 1, nullptr);
    CUDA_CHECK(cudaGetLastError());
  }

  ConvPlan& plan(const ConvGeom& g) {
    const auto key = std::make_tuple(g.n, g.c, g.h, g.w, g.k, g.r, g.pad, static_cast<int>(amp_));
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    auto p = std::make_unique<ConvPlan>();
    // --amp: 16-bit data with fp32 compute (cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configuration).
    const cudnnDataType_t dt = amp_ == AmpMode::Fp16   ? CUDNN_DATA_HALF
                               : amp_ == AmpMode::Bf16 ? CUDNN_DATA_BFLOAT16
                                                       : CUDNN_DATA_FLOAT;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->yf));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->bias));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, dt, g.n, g.c, g.h, g.w));
    CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, dt, g.n, g.k, g.out_h(), g.out_w()));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->yf, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.k,
                                           g.out_h(), g.out_w()));
    CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(p->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, g.k, 1, 1));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, dt, CUDNN_TENSOR_NCHW, g.k, g.c, g.r, g.r));
    // TF32 tensor cores (cuDNN's default math on Ampere+) unless --tf32 off (FMA: full FP32);
    // 16-bit data on tensor cores. The heuristics answer for the math type asked for here.
    p->dtype = dt;
    p->math = dt != CUDNN_DATA_FLOAT ? CUDNN_TENSOR_OP_MATH
                                     : (tf32_ ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
    for (auto* d : {&p->conv, &p->conv_bwd_data, &p->conv_bwd_filter}) {
      CUDNN_CHECK(cudnnCreateConvolutionDescriptor(d));
      CUDNN_CHECK(cudnnSetConvolution2dDescriptor(*d, g.pad, g.pad, 1, 1, 1, 1,
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
      CUDNN_CHECK(cudnnSetConvolutionMathType(*d, p->math));
    }
    if (dt != CUDNN_DATA_FLOAT) {
      p->half = true;
      p->x_elems = static_cast<std::size_t>(g.n) * g.c * g.h * g.w;
      p->y_elems = static_cast<std::size_t>(g.n) * g.k * g.out_h() * g.out_w();
      p->w_elems = static_cast<std::size_t>(g.k) * g.c * g.r * g.r;
      p->hx = alloc16(p->x_elems);
      p->hdx = alloc16(p->x_elems);
      p->hy = alloc16(p->y_elems);
      p->hdy = alloc16(p->y_elems);
      p->hw = alloc16(p->w_elems);
      p->hdw = alloc16(p->w_elems);
    }
    // fp32 with one input channel (layer1): the direct kernels, no cuDNN algorithm to choose. Their
    // scratch is allocated here, before any step is captured, so a graph's address stays valid.
    if (!p->half && direct_conv_supported(g.c, g.k, g.h, g.w, g.r, g.pad)) {
      p->direct = true;
      CUDA_CHECK(cudaMalloc(&p->wgrad_partials,
                            sizeof(float) * direct_conv_wgrad_partials(g.n, g.k, g.r)));
      CUDA_CHECK(cudaMalloc(&p->fwd_moments, sizeof(double) * 2 * g.k * g.n));
      return *plans_.emplace(key, std::move(p)).first->second;
    }
    // Algorithm choice once per shape and direction, from cuDNN's heuristics (pick_algorithm),
    // each descriptor then set to the math type of its algorithm. Backward data: on first use.
    int found = 0;
    cudnnConvolutionFwdAlgoPerf_t fp[kHeuristics];
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(cudnn_, p->x, p->w, p->conv, p->y,
                                                       kHeuristics, &found, fp));
    const auto* f = pick_preferred(fp, found, fma_only(*p), dt == CUDNN_DATA_FLOAT,
                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
    if (f == nullptr) no_algorithm("forward", g, *p, found);
    p->fwd = f->algo;
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, f->mathType));
    cudnnConvolutionBwdFilterAlgoPerf_t wp[kHeuristics];
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        cudnn_, p->x, p->y, p->conv_bwd_filter, p->w, kHeuristics, &found, wp));
    const auto* bf = pick_preferred(wp, found, fma_only(*p), dt == CUDNN_DATA_FLOAT,
                                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT);
    if (bf == nullptr) no_algorithm("backward-filter", g, *p, found);
    p->bwd_filter = bf->algo;
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv_bwd_filter, bf->mathType));
    std::size_t a = 0, c = 0;
    CUDNN_CHECK(
        cudnnGetConvolutionForwardWorkspaceSize(cudnn_, p->x, p->w, p->conv, p->y, p->fwd, &a));
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        cudnn_, p->x, p->y, p->conv_bwd_filter, p->w, p->bwd_filter, &c));
    grow_workspace(std::max(a, c));
    p->bwd_filter_bytes = c;
    return *plans_.emplace(key, std::move(p)).first->second;
  }

  static constexpr int kHeuristics = 8;  // entries asked of cuDNN's heuristics per direction

  static bool fma_only(const ConvPlan& p) { return p.math == CUDNN_FMA_MATH; }

  // The backward-data algorithm of a plan, chosen on its first use (an eager step).
  void choose_backward_data(const ConvGeom& g, ConvPlan& p) {
    int found = 0;
    cudnnConvolutionBwdDataAlgoPerf_t dp[kHeuristics];
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnn_, p.w, p.y, p.conv_bwd_data, p.x,
                                                            kHeuristics, &found, dp));
    const auto* d = pick_algorithm(dp, found, fma_only(p));
    if (d == nullptr) no_algorithm("backward-data", g, p, found);
    p.bwd_data = d->algo;
    CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv_bwd_data, d->mathType));
    std::size_t b = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(cudnn_, p.w, p.y, p.conv_bwd_data, p.x,
                                                             p.bwd_data, &b));
    grow_workspace(b);
    p.has_bwd_data = true;
  }

  // One explicit workspace, grown to the largest need of any plan. The old one stays allocated
  // (freed at teardown): a captured step graph may still point at it.
  void grow_workspace(std::size_t bytes) {
    if (bytes <= workspace_bytes_) return;
    if (workspace_) retired_.push_back(workspace_);
    CUDA_CHECK(cudaMalloc(&workspace_, bytes));
    workspace_bytes_ = bytes;
  }

  // No usable algorithm: a fatal error that names the layer, the shape and the data type.
  [[noreturn]] static void no_algorithm(const char* direction, const ConvGeom& g, const ConvPlan& p,
                                        int found) {
    const char* layer = g.c == 1 ? "layer1.0" : g.c == 16 ? "layer2.0" : "a convolution";
    const char* dtype = p.dtype == CUDNN_DATA_HALF       ? "fp16 (--amp fp16)"
                        : p.dtype == CUDNN_DATA_BFLOAT16 ? "bf16 (--amp bf16)"
                        : p.math == CUDNN_FMA_MATH       ? "fp32 with FMA math (--tf32 off)"
                                                         : "fp32 (TF32 allowed)";
    fail_internal(std::string("cuDNN offers no usable ") + direction + " algorithm for " + layer +
                      " (input " + std::to_string(g.n) + "x" + std::to_string(g.c) + "x" +
                      std::to_string(g.h) + "x" + std::to_string(g.w) + ", " + std::to_string(g.k) +
                      " filters " + std::to_string(g.r) + "x" + std::to_string(g.r) + ", pad " +
                      std::to_string(g.pad) + ", " + dtype + "): none of the " +
                      std::to_string(found) +
                      " heuristic candidates has status success and an allowed math type; try "
                      "another --amp / --tf32 setting",
                  __FILE__, __LINE__);
  }

  bool tf32_;
  cudaStream_t stream_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  // conv2d_backward's second stream: its cuDNN handle, workspace, and fork/join events.
  cudaStream_t side_ = nullptr;
  cudnnHandle_t cudnn_side_ = nullptr;
  void* side_workspace_ = nullptr;
  std::size_t side_workspace_bytes_ = 0;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  void* cublas_workspace_ = nullptr;
  double* loss_sum_ = nullptr;             // the training loss summed since take_loss_sum
  DeviceScalars* dev_scalars_ = nullptr;   // this step's values, read by captured kernels
  int* first_pending_ = nullptr;           // --amp fp16: 1 while every update so far was skipped
  DeviceScalars* host_scalars_ = nullptr;  // [kScalarSlots] pinned staging ring
  cudaEvent_t scalar_copied_[kScalarSlots] = {};
  int next_slot_ = 0;
  std::int64_t step_offset_ = 0;  // host copy of the offset, for the bounds check
  cublasHandle_t cublas_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  std::vector<void*> retired_;  // outgrown workspaces
  void* scalars_ = nullptr;     // [0]: double loss sum; [8]: int top-1, [12]: int top-5; [16..24)
  double* bn_sums_ = nullptr;   // [2*C]: sum(g), sum(g*(x-mean)) of the BN backward
  double* bn_partials_ = nullptr;  // [2*kMaxPartials]: the split BN reductions' partial sums
  std::map<std::tuple<int, int, int, int, int, int, int, int>, std::unique_ptr<ConvPlan>> plans_;
  std::map<std::tuple<int, int, int, int>, std::unique_ptr<LinearScratch>> linear_;
  const BnSync* bn_sync_ = nullptr;  // --sync-bn exchanges (host), or nullptr
  // The last direct convolution's output and its BN partial moments, until the batchnorm_stats
  // that reads them (any other convolution or an upload forgets them: y may be rewritten).
  struct FusedMoments {
    const float* y = nullptr;
    const double* moments = nullptr;
    int c = 0, n = 0, hw = 0;
  } fused_;
  AmpMode amp_ = AmpMode::Off;
  const float* loss_scale_ = nullptr;  // device: --amp fp16's loss scale (GradScaler)
  const float* skip_step_ = nullptr;   // device: != 0 where this step's SGD is skipped
  std::uint8_t* dev_images_[2] = {nullptr, nullptr};
  std::uint8_t* dev_labels_[2] = {nullptr, nullptr};
  std::int64_t* dev_order_[2] = {nullptr, nullptr};
  std::size_t order_capacity_[2] = {0, 0};
  std::size_t order_size_[2] = {0, 0};
};

}  // namespace

std::unique_ptr<Ops> make_cuda_ops(bool tf32) {
  return std::make_unique<CudaOps>(tf32);
}

}  // namespace mnist_ddp
