// cuda_conv.cu — CudaOps' convolutions (cuda_ops.hpp): cuDNN plans with the algorithm chosen
// once per shape, one growing workspace, layer2's filter gradient on a second stream, and fp32
// layer1 on the direct kernels (direct_conv.cuh).
#include "ops/cuda/cuda_ops.hpp"

namespace mnist_ddp {
namespace cuda_ops {
namespace {

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

}  // namespace

ConvPlan::~ConvPlan() {
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
  if (own_partials) cudaFree(own_partials);
  if (fwd_moments) cudaFree(fwd_moments);
}

void CudaOps::conv2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b,
                             float* y) {
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

void CudaOps::conv2d_backward_filter(const ConvGeom& g, const float* x, const float* dy, float* dw,
                                     float* db) {
  ConvPlan& p = plan(g);
  if (p.direct) {  // dw and db, both overwritten
    launch_direct_conv_wgrad(stream_, g.n, g.k, g.h, g.w, g.r, g.pad, x, dy, p.wgrad_partials, dw,
                             db);
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  if (p.own_wgrad) {  // dw and db, both overwritten
    launch_wgrad_tf32(stream_, g.n, g.c, g.k, g.h, g.w, g.r, g.pad, x, dy, p.own_partials, dw, db);
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  filter_gradient(p, cudnn_, workspace_, workspace_bytes_, x, dy, dw, db);
}

// Both gradients of layer2 at once: the filter gradient on side_ while the data gradient runs on
// stream_ (each alone fills a fraction of the GPU at batch 100). The direct kernels (layer1)
// and --amp's 16-bit copies (both directions share the 16-bit dy) keep them in turn.
void CudaOps::conv2d_backward(const ConvGeom& g, const float* x, const float* w, const float* dy,
                              float* dw, float* db, float* dx) {
  ConvPlan& p = plan(g);
  if (dx == nullptr || p.direct || p.half) {
    conv2d_backward_filter(g, x, dy, dw, db);
    if (dx != nullptr) conv2d_backward_data(g, w, dy, dx);
    return;
  }
  if (!p.has_bwd_data) choose_backward_data(g, p);  // first use: an eager step, never captured
  // The side stream's own workspace (the main one is the data gradient's meanwhile), grown on
  // first use, which is an eager step: a captured graph never sees it grow.
  if (!p.own_wgrad && p.bwd_filter_bytes > side_workspace_bytes_) {
    if (side_workspace_) retired_.push_back(side_workspace_);
    CUDA_CHECK(cudaMalloc(&side_workspace_, p.bwd_filter_bytes));
    side_workspace_bytes_ = p.bwd_filter_bytes;
  }
  // Fork: side_ waits for everything queued on stream_ so far (dy and x are written there).
  // While capturing, this event pulls side_ into the same graph as a parallel branch.
  CUDA_CHECK(cudaEventRecord(fork_, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(side_, fork_, 0));
  if (p.own_wgrad) {
    launch_wgrad_tf32(side_, g.n, g.c, g.k, g.h, g.w, g.r, g.pad, x, dy, p.own_partials, dw, db);
    CUDA_CHECK(cudaGetLastError());
  } else {
    filter_gradient(p, cudnn_side_, side_workspace_, side_workspace_bytes_, x, dy, dw, db);
  }
  CUDA_CHECK(cudaEventRecord(join_, side_));
  data_gradient(p, w, dy, dx);
  // Join: whatever follows on stream_ (the gradient bucket's all-reduce, the next layer's
  // backward, the end of a capture) waits for dw and db.
  CUDA_CHECK(cudaStreamWaitEvent(stream_, join_, 0));
}

// cuDNN's filter and bias gradients of a non-direct plan on `handle` with its workspace.
void CudaOps::filter_gradient(ConvPlan& p, cudnnHandle_t handle, void* workspace,
                              std::size_t ws_bytes, const float* x, const float* dy, float* dw,
                              float* db) {
  const float one = 1.f, zero = 0.f;
  if (p.half) {
    // The weight gradient is produced in 16 bits (an fp16 overflow becomes inf: the scaler
    // skips the step) and widened into the fp32 gradient arena.
    cast_to16(x, p.hx, p.x_elems);
    cast_to16(dy, p.hdy, p.y_elems);
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, p.x, p.hx, p.y, p.hdy,
                                               p.conv_bwd_filter, p.bwd_filter, workspace, ws_bytes,
                                               &zero, p.w, p.hdw));
    cast_from16(p.hdw, dw, p.w_elems);
  } else {
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, p.x, x, p.y, dy, p.conv_bwd_filter,
                                               p.bwd_filter, workspace, ws_bytes, &zero, p.w, dw));
  }
  CUDNN_CHECK(cudnnConvolutionBackwardBias(handle, &one, p.yf, dy, &zero, p.bias, db));
}

void CudaOps::conv2d_backward_data(const ConvGeom& g, const float* w, const float* dy, float* dx) {
  ConvPlan& p = plan(g);
  if (!p.has_bwd_data) choose_backward_data(g, p);  // first use: an eager step, never captured
  data_gradient(p, w, dy, dx);
}

// cuDNN's data gradient of a plan whose algorithm is chosen, on stream_.
void CudaOps::data_gradient(ConvPlan& p, const float* w, const float* dy, float* dx) {
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

ConvPlan& CudaOps::plan(const ConvGeom& g) {
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
  p->math =
      dt != CUDNN_DATA_FLOAT ? CUDNN_TENSOR_OP_MATH : (tf32_ ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
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
    CUDA_CHECK(
        cudaMalloc(&p->wgrad_partials, sizeof(float) * direct_conv_wgrad_partials(g.n, g.k, g.r)));
    CUDA_CHECK(cudaMalloc(&p->fwd_moments, sizeof(double) * 2 * g.k * g.n));
    return *plans_.emplace(key, std::move(p)).first->second;
  }
  // --gpu-kernels own: layer2's weight gradient on TF32 tensor cores where TF32 is allowed and
  // the kernel takes the shape; its scratch allocated here, before any step is captured.
  if (!p->half && tf32_ && kernels_ == GpuKernels::Own &&
      wgrad_tf32_supported(g.c, g.k, g.h, g.w, g.r, g.pad)) {
    p->own_wgrad = true;
    CUDA_CHECK(
        cudaMalloc(&p->own_partials, sizeof(float) * wgrad_tf32_partials(g.n, g.c, g.k, g.r)));
  }
  // Algorithm choice once per shape and direction, from cuDNN's heuristics (pick_algorithm),
  // each descriptor then set to the math type of its algorithm. Backward data: on first use.
  int found = 0;
  cudnnConvolutionFwdAlgoPerf_t fp[kHeuristics];
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(cudnn_, p->x, p->w, p->conv, p->y, kHeuristics,
                                                     &found, fp));
  const auto* f = pick_preferred(fp, found, fma_only(*p), dt == CUDNN_DATA_FLOAT,
                                 CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
  if (f == nullptr) no_algorithm("forward", g, *p, found);
  p->fwd = f->algo;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, f->mathType));
  cudnnConvolutionBwdFilterAlgoPerf_t wp[kHeuristics];
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnn_, p->x, p->y, p->conv_bwd_filter,
                                                            p->w, kHeuristics, &found, wp));
  const auto* bf = pick_preferred(wp, found, fma_only(*p), dt == CUDNN_DATA_FLOAT,
                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT);
  if (bf == nullptr) no_algorithm("backward-filter", g, *p, found);
  p->bwd_filter = bf->algo;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv_bwd_filter, bf->mathType));
  std::size_t a = 0, c = 0;
  CUDNN_CHECK(
      cudnnGetConvolutionForwardWorkspaceSize(cudnn_, p->x, p->w, p->conv, p->y, p->fwd, &a));
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnn_, p->x, p->y, p->conv_bwd_filter,
                                                             p->w, p->bwd_filter, &c));
  // --gpu-kernels own: cuDNN's filter gradient never runs, so its workspace is not needed.
  if (p->own_wgrad) c = 0;
  grow_workspace(std::max(a, c));
  p->bwd_filter_bytes = c;
  return *plans_.emplace(key, std::move(p)).first->second;
}

bool CudaOps::fma_only(const ConvPlan& p) {
  return p.math == CUDNN_FMA_MATH;
}

// The backward-data algorithm of a plan, chosen on its first use (an eager step).
void CudaOps::choose_backward_data(const ConvGeom& g, ConvPlan& p) {
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
void CudaOps::grow_workspace(std::size_t bytes) {
  if (bytes <= workspace_bytes_) return;
  if (workspace_) retired_.push_back(workspace_);
  CUDA_CHECK(cudaMalloc(&workspace_, bytes));
  workspace_bytes_ = bytes;
}

// No usable algorithm: a fatal error that names the layer, the shape and the data type.
void CudaOps::no_algorithm(const char* direction, const ConvGeom& g, const ConvPlan& p, int found) {
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

}  // namespace cuda_ops

}  // namespace mnist_ddp
