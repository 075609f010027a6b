// cuda_ops.hpp — CudaOps (private to src/ops/cuda/): the Ops interface on one GPU, declared once
// and defined by concern: cuda_ops.cu (construction, the fc layer, the loss and the streams),
// cuda_conv.cu (cuDNN convolution plans and the direct layer1 kernels), cuda_bn_pool.cu
// (BatchNorm statistics and the fused BN->ReLU->maxpool), cuda_data.cu (memory, the resident
// dataset, the batch gather and the per-step scalars), cuda_optim_amp.cu (SGD, --amp's 16-bit
// copies and the 16-bit gradient encodings).
//
// cuDNN (v9 legacy API) for the convolutions with the algorithm chosen once per shape
// (cudnnGet*Algorithm_v7) and one explicit, growing workspace, except fp32 layer1 (one input
// channel: direct_conv.cuh's kernels); cuBLAS for the fc layer; own kernels (kernels.cu, launched
// through kernels.cuh) for BN statistics, the fused BN->ReLU->maxpool forward/backward, softmax
// cross-entropy with top-1/top-5, SGD, and the batch gather/normalise from the device-resident
// dataset. Activations are plain NCHW (so the flatten before fc is a copy). Semantics are the CPU
// reference's (cpu_kernels.hpp).
//
// Ordering: every op runs on one blocking stream (stream()), so a whole training step can be
// captured into a CUDA graph (step_graph.hpp); conv2d_backward alone forks layer2's filter
// gradient onto a second blocking stream and joins it by events before returning (a parallel
// branch of the captured graph, never work left in flight). The synchronous cudaMemcpy of
// upload/download/loss run on the legacy default stream, which waits for that stream's work.
// NcclComm joins this stream with events (Comm::bind_stream). The values that change per step
// (batch offset, lr) are copied into device memory before the step (set_step_scalars), and the
// training loss is summed on the device, so nothing inside a step needs the host.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/diagnostics/cuda/cuda_check.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/trace/cuda/device_stamps.hpp"
#include "ops/cuda/direct_conv.cuh"
#include "ops/cuda/kernels.cuh"
#include "ops/cuda/wgrad_tf32.cuh"

namespace mnist_ddp::cuda_ops {

using namespace kernels;  // the kernels' launchers, kThreads, blocks_for, DeviceScalars

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
  // --gpu-kernels own, fp32 with TF32 allowed, a shape it takes (layer2): the weight and bias
  // gradients by wgrad_tf32.cuh instead of cuDNN; own_partials is its split reduction's scratch.
  bool own_wgrad = false;
  float* own_partials = nullptr;
  double* fwd_moments = nullptr;  // [2 * K * N]: the forward's BN partial moments of y
  ~ConvPlan();
};

// --amp: the fc layer's 16-bit copies for one (n, in, out), owned like ConvPlan's.
struct LinearScratch {
  void *x = nullptr, *w = nullptr, *dy = nullptr;
  ~LinearScratch();
};

class CudaOps final : public Ops {
 public:
  CudaOps(bool tf32, GpuKernels kernels);
  ~CudaOps() override;
  Device device() const override;
  void conv2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b,
                      float* y) override;
  void conv2d_backward_filter(const ConvGeom& g, const float* x, const float* dy, float* dw,
                              float* db) override;
  // Both gradients of layer2 at once: the filter gradient on side_ while the data gradient runs on
  // stream_ (each alone fills a fraction of the GPU at batch 100). The direct kernels (layer1)
  // and --amp's 16-bit copies (both directions share the 16-bit dy) keep them in turn.
  void conv2d_backward(const ConvGeom& g, const float* x, const float* w, const float* dy,
                       float* dw, float* db, float* dx) override;
  // cuDNN's filter and bias gradients of a non-direct plan on `handle` with its workspace.
  void filter_gradient(ConvPlan& p, cudnnHandle_t handle, void* workspace, std::size_t ws_bytes,
                       const float* x, const float* dy, float* dw, float* db);
  void conv2d_backward_data(const ConvGeom& g, const float* w, const float* dy, float* dx) override;
  // cuDNN's data gradient of a plan whose algorithm is chosen, on stream_.
  void data_gradient(ConvPlan& p, const float* w, const float* dy, float* dx);
  void batchnorm_stats(int c, int n, int hw, const float* x, double eps, double momentum,
                       float* save_mean, float* save_invstd, float* running_mean,
                       float* running_var) override;
  void batchnorm_eval_stats(int c, const float* running_mean, const float* running_var, double eps,
                            float* mean, float* invstd) override;
  void bn_relu_pool_forward(int c, int n, int h, int w, const float* x, const float* gamma,
                            const float* beta, const float* mean, const float* invstd, float* y,
                            std::uint8_t* argmax) override;
  void bn_relu_pool_backward(int c, int n, int h, int w, const float* x, const float* y,
                             const float* dy, const std::uint8_t* argmax, const float* gamma,
                             const float* mean, const float* invstd, bool batch_stats, float* dx,
                             float* dgamma, float* dbeta) override;
  void linear_forward(int n, int in, int out, const float* x, const float* w, const float* b,
                      float* y) override;
  void linear_backward(int n, int in, int out, const float* x, const float* w, const float* dy,
                       float* dx, float* dw, float* db) override;
  double softmax_cross_entropy(int n, int classes, const float* logits, const std::int32_t* labels,
                               float* dlogits, double grad_scale) override;
  int topk_correct(int n, int classes, const float* logits, const std::int32_t* labels,
                   int k) override;
  void to_fc_rows(int c, int n, int hw, const float* x, float* y) override;
  void from_fc_rows(int c, int n, int hw, const float* x, float* y) override;
  void encode_half(std::size_t n, const float* g, std::uint16_t* h, DType type,
                   float divisor) override;
  void decode_half(std::size_t n, const std::uint16_t* h, float* g, DType type) override;
  void add_into(std::size_t n, const float* x, float* y) override;
  void zero(std::size_t n, float* y) override;
  void sgd_step(std::size_t n, float* p, const float* g, float* buf, const SgdParams& s) override;
  void set_step_scalars(const StepScalars& s) override;
  void gather_at_step(int slot, int n, float mean, float std, float* x, std::int32_t* y) override;
  void accumulate_loss(int n, int classes, const float* logits, const std::int32_t* labels,
                       float* dlogits, double grad_scale) override;
  double take_loss_sum() override;
  void* stream() const override;
  std::unique_ptr<StampClock> make_stamp_clock() override;
  void set_amp(AmpMode mode, const float* loss_scale, const float* skip_step) override;
  // step_graph.cu and grad_scaler.cu.
  std::unique_ptr<StepGraphs> make_step_graphs(CaptureHooks hooks, bool inject_failure) override;
  std::unique_ptr<GradScaler> make_grad_scaler(const LossScaleRule& rule) override;
  // SyncBatchNorm: the BN ops exchange their per-channel statistics through `sync` on the host
  // (a device-to-host copy and back per BN layer, so such a step is not graph-capturable).
  void set_bn_sync(const BnSync* sync) override;
  std::uint8_t* alloc_bytes(std::size_t n) override;
  void free_bytes(std::uint8_t* p) override;
  void upload(const void* host, void* backend, std::size_t bytes) override;
  void download(const void* backend, void* host, std::size_t bytes) override;
  void load_dataset(int slot, const Dataset& d) override;
  void set_order(int slot, std::span<const std::int64_t> order) override;
  void gather(int slot, std::int64_t offset, int n, float mean, float std, float* x,
              std::int32_t* y) override;

 private:
  static constexpr std::size_t kCublasWorkspace = 32u << 20;  // cuBLAS's advice for Hopper
  static constexpr int kScalarSlots = 4;
  // offset is checked on the host; with at != nullptr the kernel reads it from device memory.
  void launch_gather(int slot, std::int64_t offset, int n, float mean, float std, float* x,
                     std::int32_t* y, const DeviceScalars* at);
  // --amp: the 16-bit element type, and fp32 <-> 16-bit copies on the stream.
  cudaDataType_t t16() const;
  void cast_to16(const float* x, void* y, std::size_t n);
  void cast_from16(const void* x, float* y, std::size_t n);
  void* alloc16(std::size_t n);
  LinearScratch& linear_scratch(int n, int in, int out);
  // Top-k counters the training loss kernel writes and nobody reads.
  int* xent_counts_scratch();
  void run_xent(int n, int classes, const float* logits, const std::int32_t* labels, float* dlogits,
                double grad_scale);
  ConvPlan& plan(const ConvGeom& g);
  static constexpr int kHeuristics = 8;  // entries asked of cuDNN's heuristics per direction
  static bool fma_only(const ConvPlan& p);
  // The backward-data algorithm of a plan, chosen on its first use (an eager step).
  void choose_backward_data(const ConvGeom& g, ConvPlan& p);
  // One explicit workspace, grown to the largest need of any plan. The old one stays allocated
  // (freed at teardown): a captured step graph may still point at it.
  void grow_workspace(std::size_t bytes);
  // No usable algorithm: a fatal error that names the layer, the shape and the data type.
  [[noreturn]] static void no_algorithm(const char* direction, const ConvGeom& g, const ConvPlan& p,
                                        int found);
  bool tf32_;
  GpuKernels kernels_;  // --gpu-kernels
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

}  // namespace mnist_ddp::cuda_ops
