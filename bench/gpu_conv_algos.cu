// gpu_conv_algos.cu — every cuDNN algorithm for each convolution of the ConvNet's training step
// (batch 100; fp32 data, TF32 allowed as in the default run), timed by cudnnFind*AlgorithmEx,
// next to the one mnist_ddp runs, as CudaOps chooses (the heuristics' first deterministic
// candidate, or the preferred IMPLICIT_GEMM forward and FFT weight gradient when listed; for
// layer1, one input channel, its own direct kernels, direct_conv.cuh, timed the same way on the
// same data), and the heuristics' pick; each also timed warm with CUDA events. Answers "would
// another algorithm close the gap" without a profiler. Needs a GPU ("no usable GPU" and exit 1
// without one). Run: build/bench/gpu_conv_algos (tools/gpu-suite.sh step ops_gpu runs it after
// gpu_ops_bench).
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdio>
#include <string>
#include <vector>

#include "mnist_ddp/diagnostics/cuda/cuda_check.hpp"
#include "ops/cuda/direct_conv.cuh"

namespace {

// One convolution: x[N][C][H][W] * w[K][C][R][R], pad, stride 1 -> y[N][K][H][W].
struct Shape {
  const char* name;
  int n, c, h, w, k, r, pad;
  bool needs_dgrad;  // layer1's input gradient is never computed
};
constexpr Shape kShapes[] = {{"layer1", 100, 1, 28, 28, 16, 5, 2, false},
                             {"layer2", 100, 16, 14, 14, 32, 5, 2, true}};
constexpr int kMaxAlgos = 16;
constexpr std::size_t kWorkspace = 256u << 20;  // Find may try algorithms up to this

struct Descs {
  cudnnTensorDescriptor_t x{}, y{};
  cudnnFilterDescriptor_t w{};
  cudnnConvolutionDescriptor_t conv{};
  Descs(const Shape& s) {
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.n, s.c, s.h, s.w));
    CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.n, s.k, s.h, s.w));
    CUDNN_CHECK(
        cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.k, s.c, s.r, s.r));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, s.pad, s.pad, 1, 1, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_DEFAULT_MATH));
  }
  ~Descs() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
};

// CudaOps' rule (pick_algorithm in cuda_conv.cu): the first successful deterministic candidate.
template <class Perf>
int first_deterministic(const Perf* p, int found) {
  for (int i = 0; i < found; ++i)
    if (p[i].status == CUDNN_STATUS_SUCCESS && p[i].determinism == CUDNN_DETERMINISTIC)
      return static_cast<int>(p[i].algo);
  for (int i = 0; i < found; ++i)
    if (p[i].status == CUDNN_STATUS_SUCCESS) return static_cast<int>(p[i].algo);
  return -1;
}

// CudaOps' fp32 preference (pick_preferred): algorithm `preferred` when the heuristics list it as
// successful and deterministic, else the heuristics' pick.
template <class Perf, class Algo>
int preferred_or_first(const Perf* p, int found, Algo preferred) {
  for (int i = 0; i < found; ++i)
    if (p[i].algo == preferred && p[i].status == CUDNN_STATUS_SUCCESS &&
        p[i].determinism == CUDNN_DETERMINISTIC)
      return static_cast<int>(preferred);
  return first_deterministic(p, found);
}

constexpr int kTimed = 50;  // launches per algorithm, warm, timed by CUDA events

// Microseconds per launch of run() (one convolution), warm: kTimed back-to-back launches between
// two events on the default stream.
template <class Run>
double time_us(Run run) {
  run();
  cudaEvent_t a{}, b{};
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  CUDA_CHECK(cudaEventRecord(a));
  for (int i = 0; i < kTimed; ++i) run();
  CUDA_CHECK(cudaEventRecord(b));
  // Sync: the second event, to read the elapsed time.
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return 1000.0 * ms / kTimed;
}

// One row per algorithm cuDNN could run, in Find's order: Find's time (one cold-ish launch), the
// warm time per launch (CUDA events), workspace; the one mnist_ddp runs marked. run(i) launches
// algorithm p[i] with its math type.
template <class Perf, class Run>
void print_rows(const char* layer, const char* dir, const Perf* p, int found, int ours, int heur,
                Run run) {
  for (int i = 0; i < found; ++i) {
    if (p[i].status != CUDNN_STATUS_SUCCESS) continue;
    const double warm = time_us([&] { run(i); });
    std::printf("%-7s %-6s algo %d  %-6s %-13s find %7.1f us  warm %7.1f us %7.1f MiB%s\n", layer,
                dir, static_cast<int>(p[i].algo),
                p[i].mathType == CUDNN_FMA_MATH       ? "fma"
                : p[i].mathType == CUDNN_DEFAULT_MATH ? "tf32"
                                                      : "tensor",
                p[i].determinism == CUDNN_DETERMINISTIC ? "deterministic" : "atomics",
                1000.0 * p[i].time, warm, p[i].memory / 1048576.0,
                static_cast<int>(p[i].algo) == ours   ? "  <- mnist_ddp"
                : static_cast<int>(p[i].algo) == heur ? "  (the heuristics' pick)"
                                                      : "");
  }
}

// The direct kernels' row (fp32 arithmetic, bitwise deterministic), the bias included.
template <class Run>
void print_direct(const char* layer, const char* dir, const char* what, Run run) {
  const double warm = time_us(run);
  std::printf(
      "%-7s %-6s direct  %-6s %-13s find       -     warm %7.1f us %7.1f MiB  <- "
      "mnist_ddp (%s)\n",
      layer, dir, "fp32", "deterministic", warm, 0.0, what);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    std::fprintf(stderr, "gpu_conv_algos: error: no usable GPU (no CUDA device visible)\n");
    return 1;
  }
  CUDA_CHECK(cudaSetDevice(0));
  cudnnHandle_t h{};
  CUDNN_CHECK(cudnnCreate(&h));
  void* ws = nullptr;
  CUDA_CHECK(cudaMalloc(&ws, kWorkspace));
  std::printf(
      "cuDNN %zu; batch 100, fp32 data, TF32 allowed; find: cudnnFind*AlgorithmEx's time; warm: "
      "CUDA events over %d launches\n",
      cudnnGetVersion(), kTimed);
  for (const Shape& s : kShapes) {
    const Descs d(s);
    const std::size_t xn = static_cast<std::size_t>(s.n) * s.c * s.h * s.w;
    const std::size_t yn = static_cast<std::size_t>(s.n) * s.k * s.h * s.w;
    const std::size_t wn = static_cast<std::size_t>(s.k) * s.c * s.r * s.r;
    float *x = nullptr, *y = nullptr, *w = nullptr;
    CUDA_CHECK(cudaMalloc(&x, xn * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&y, yn * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&w, wn * sizeof(float)));
    CUDA_CHECK(cudaMemset(x, 0, xn * sizeof(float)));
    CUDA_CHECK(cudaMemset(y, 0, yn * sizeof(float)));
    CUDA_CHECK(cudaMemset(w, 0, wn * sizeof(float)));
    // CudaOps' rule: fp32 with one input channel runs the direct kernels (plus their scratch).
    const bool direct = mnist_ddp::kernels::direct_conv_supported(s.c, s.k, s.h, s.w, s.r, s.pad);
    float *b = nullptr, *db = nullptr, *partials = nullptr;
    double* moments = nullptr;  // the forward's BN partial moments, as CudaOps has them written
    CUDA_CHECK(cudaMalloc(&b, s.k * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&db, s.k * sizeof(float)));
    CUDA_CHECK(cudaMemset(b, 0, s.k * sizeof(float)));
    if (direct) CUDA_CHECK(cudaMalloc(&moments, sizeof(double) * 2 * s.k * s.n));
    if (direct) {
      const std::size_t floats = mnist_ddp::kernels::direct_conv_wgrad_partials(s.n, s.k, s.r);
      CUDA_CHECK(cudaMalloc(&partials, sizeof(float) * floats));
    }
    int found = 0;
    {
      cudnnConvolutionFwdAlgoPerf_t heur[kMaxAlgos], meas[kMaxAlgos];
      CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, kMaxAlgos,
                                                         &found, heur));
      const int pick = first_deterministic(heur, found);
      const int ours =
          direct ? -1 : preferred_or_first(heur, found, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
      CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, d.x, x, d.w, w, d.conv, d.y, y,
                                                         kMaxAlgos, &found, meas, ws, kWorkspace));
      if (direct)
        print_direct(s.name, "fwd", "direct_conv.cuh: + bias, + BN partial moments", [&] {
          mnist_ddp::kernels::launch_direct_conv_fwd(nullptr, s.n, s.k, s.h, s.w, s.r, s.pad, x, w,
                                                     b, y, moments);
          CUDA_CHECK(cudaGetLastError());
        });
      print_rows(s.name, "fwd", meas, found, ours, pick, [&](int i) {
        const float one = 1.f, zero = 0.f;
        CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, meas[i].mathType));
        CUDNN_CHECK(cudnnConvolutionForward(h, &one, d.x, x, d.w, w, d.conv, meas[i].algo, ws,
                                            kWorkspace, &zero, d.y, y));
      });
    }
    {
      cudnnConvolutionBwdFilterAlgoPerf_t heur[kMaxAlgos], meas[kMaxAlgos];
      CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, kMaxAlgos,
                                                                &found, heur));
      const int pick = first_deterministic(heur, found);
      const int ours =
          direct ? -1 : preferred_or_first(heur, found, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT);
      CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          h, d.x, x, d.y, y, d.conv, d.w, w, kMaxAlgos, &found, meas, ws, kWorkspace));
      if (direct)
        print_direct(s.name, "wgrad", "direct_conv.cuh: + bias gradient", [&] {
          mnist_ddp::kernels::launch_direct_conv_wgrad(nullptr, s.n, s.k, s.h, s.w, s.r, s.pad, x,
                                                       y, partials, w, db);
          CUDA_CHECK(cudaGetLastError());
        });
      print_rows(s.name, "wgrad", meas, found, ours, pick, [&](int i) {
        const float one = 1.f, zero = 0.f;
        CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, meas[i].mathType));
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, d.x, x, d.y, y, d.conv, meas[i].algo,
                                                   ws, kWorkspace, &zero, d.w, w));
      });
    }
    if (s.needs_dgrad) {
      cudnnConvolutionBwdDataAlgoPerf_t heur[kMaxAlgos], meas[kMaxAlgos];
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, kMaxAlgos,
                                                              &found, heur));
      const int ours = first_deterministic(heur, found);
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
          h, d.w, w, d.y, y, d.conv, d.x, x, kMaxAlgos, &found, meas, ws, kWorkspace));
      print_rows(s.name, "dgrad", meas, found, ours, ours, [&](int i) {
        const float one = 1.f, zero = 0.f;
        CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, meas[i].mathType));
        CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, d.w, w, d.y, y, d.conv, meas[i].algo, ws,
                                                 kWorkspace, &zero, d.x, x));
      });
    }
    for (float* p : {x, y, w, b, db}) CUDA_CHECK(cudaFree(p));
    if (partials) CUDA_CHECK(cudaFree(partials));
    if (moments) CUDA_CHECK(cudaFree(moments));
  }
  // Teardown explicit: cuDNN, then the CUDA context.
  CUDA_CHECK(cudaFree(ws));
  CUDNN_CHECK(cudnnDestroy(h));
  CUDA_CHECK(cudaDeviceReset());
  return 0;
}
