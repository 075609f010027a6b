// ops.hpp — the Ops interface: exactly the operations the ConvNet needs, on float32 buffers that
// live on the backend's device, in the backend's own activation layout (the model never indexes
// activations itself). Implementations:
//   reference: src/ops/cpu/cpu_ops.cpp, im2col + OpenBLAS, [C][N][H][W]; the templated
//              kernels of cpu_kernels.hpp, checked against finite differences.
//   onednn:    src/ops/cpu/dnnl_backend.cpp, oneDNN JIT convolutions on channel-blocked
//              [N][C/B][H][W][B] activations (B = 16 with AVX-512, 8 with AVX2); the default
//              CPU backend (2.5x faster convolutions).
//   cuda:      src/ops/cuda/cuda_ops.hpp (defined by concern in cuda_*.cu), cuDNN convolutions,
//              cuBLAS fc, own kernels (kernels.cu);
//              NCHW, one stream (and a second one inside conv2d_backward, joined before it
//              returns).
// Parameters and gradients are always in PyTorch's layout (OIHW conv weights, [out][in] fc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "mnist_ddp/base/amp_mode.hpp"
#include "mnist_ddp/base/choices.hpp"
#include "mnist_ddp/base/dtype.hpp"
#include "mnist_ddp/base/enum_names.hpp"
#include "mnist_ddp/data/dataset.hpp"
#include "mnist_ddp/launch/device.hpp"
#include "mnist_ddp/ops/backend_options.hpp"
#include "mnist_ddp/ops/grad_scaler.hpp"
#include "mnist_ddp/ops/op_params.hpp"
#include "mnist_ddp/ops/step_graph.hpp"
#include "mnist_ddp/trace/trace.hpp"

namespace mnist_ddp {

class Ops {
 public:
  virtual ~Ops() = default;
  virtual Device device() const = 0;

  virtual void conv2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b,
                              float* y) = 0;
  virtual void conv2d_backward_filter(const ConvGeom& g, const float* x, const float* dy, float* dw,
                                      float* db) = 0;
  virtual void conv2d_backward_data(const ConvGeom& g, const float* w, const float* dy,
                                    float* dx) = 0;
  // Both gradients of one convolution: conv2d_backward_filter's dw and db and, where dx is not
  // nullptr, conv2d_backward_data's dx, bitwise the same as those two calls in turn. The default
  // (ops.cpp) makes them in turn; the CUDA backend runs the filter gradient on a second stream,
  // concurrently with the data gradient (they read the same dy and write disjoint buffers), and
  // joins it before returning.
  virtual void conv2d_backward(const ConvGeom& g, const float* x, const float* w, const float* dy,
                               float* dw, float* db, float* dx);
  // Training-BN statistics of x (c channels, n images of hw pixels, backend layout).
  virtual void batchnorm_stats(int c, int n, int hw, const float* x, double eps, double momentum,
                               float* save_mean, float* save_invstd, float* running_mean,
                               float* running_var) = 0;
  virtual void batchnorm_eval_stats(int c, const float* running_mean, const float* running_var,
                                    double eps, float* mean, float* invstd) = 0;
  virtual void bn_relu_pool_forward(int c, int n, int h, int w, const float* x, const float* gamma,
                                    const float* beta, const float* mean, const float* invstd,
                                    float* y, std::uint8_t* argmax) = 0;
  virtual void bn_relu_pool_backward(int c, int n, int h, int w, const float* x, const float* y,
                                     const float* dy, const std::uint8_t* argmax,
                                     const float* gamma, const float* mean, const float* invstd,
                                     bool batch_stats, float* dx, float* dgamma, float* dbeta) = 0;
  // One conv block's backward, as the model runs it: bn_relu_pool_backward into bn.dx, then
  // conv2d_backward(g, x, w, bn.dx, dw, db, dx) reading it; the same bits as those two calls.
  // bn.dx is the block's scratch here, not an output: afterwards its contents are unspecified (the
  // CPU backend under --amp bf16 may store only the bf16 copy its convolution reads). The default
  // (ops.cpp) makes the two calls.
  virtual void bn_relu_pool_conv_backward(const BnReluPoolGrad& bn, const ConvGeom& g,
                                          const float* x, const float* w, float* dw, float* db,
                                          float* dx);
  virtual void linear_forward(int n, int in, int out, const float* x, const float* w,
                              const float* b, float* y) = 0;
  virtual void linear_backward(int n, int in, int out, const float* x, const float* w,
                               const float* dy, float* dx, float* dw, float* db) = 0;
  // Returns the summed loss; dlogits gets (softmax - onehot) * grad_scale.
  virtual double softmax_cross_entropy(int n, int classes, const float* logits,
                                       const std::int32_t* labels, float* dlogits,
                                       double grad_scale) = 0;
  virtual int topk_correct(int n, int classes, const float* logits, const std::int32_t* labels,
                           int k) = 0;
  // Activation layout <-> PyTorch's flattened fc input [N][C*HW] (and its gradient back).
  virtual void to_fc_rows(int c, int n, int hw, const float* x, float* y) = 0;
  virtual void from_fc_rows(int c, int n, int hw, const float* x, float* y) = 0;
  // The fp16/bf16 gradient hooks' casts (type F16 or BF16), in backend memory, on the ops'
  // stream: encode h[i] = T(float(T(g[i])) / divisor) (PyTorch's compress hook: the cast, then
  // the division in 16 bits, computed in fp32 and rounded to T); decode g[i] = float(h[i]).
  virtual void encode_half(std::size_t n, const float* g, std::uint16_t* h, DType type,
                           float divisor) = 0;
  virtual void decode_half(std::size_t n, const std::uint16_t* h, float* g, DType type) = 0;
  // Gradient accumulation (--accumulate), in backend memory on the ops' stream: y[i] += x[i],
  // and y[i] = 0.
  virtual void add_into(std::size_t n, const float* x, float* y) = 0;
  virtual void zero(std::size_t n, float* y) = 0;
  // Byte buffers in backend memory (maxpool argmax, int32 labels); the backend owns them.
  virtual std::uint8_t* alloc_bytes(std::size_t n) = 0;
  virtual void free_bytes(std::uint8_t* p) = 0;

  // Host <-> backend memory (initial weights, checkpoints, replica hashes; never per step).
  virtual void upload(const void* host, void* backend, std::size_t bytes) = 0;
  virtual void download(const void* backend, void* host, std::size_t bytes) = 0;

  // The data: each split is placed in backend memory once (slot kTrainSplit: the training set;
  // kEvalSplit: the one evaluation reads, MNIST's t10k files); the visiting order is handed over
  // once per epoch (or evaluation); gather then produces a normalised batch x[n][784]
  // (p/255 - mean)/std and labels y[n] for order[offset, offset + n) without any host-to-device
  // traffic per step.
  static constexpr int kTrainSplit = 0;
  static constexpr int kEvalSplit = 1;
  virtual void load_dataset(int slot, const Dataset& d) = 0;
  virtual void set_order(int slot, std::span<const std::int64_t> order) = 0;
  virtual void gather(int slot, std::int64_t offset, int n, float mean, float std, float* x,
                      std::int32_t* y) = 0;

  // ---- What lets a training step be captured once and replayed (CUDA graphs) ----------------
  // The values that change from step to step live in backend memory, so a captured step reads
  // this step's values at replay time and the graph itself never changes.
  struct StepScalars {
    std::int64_t offset = 0;  // into the training visiting order
    double lr = 0;
    bool first_step = false;  // the optimizer's first update (momentum buffer := gradient)
  };
  virtual void set_step_scalars(const StepScalars& s) = 0;
  // gather() at the offset of the last set_step_scalars.
  virtual void gather_at_step(int slot, int n, float mean, float std, float* x,
                              std::int32_t* y) = 0;
  // One SGD update (cpu_kernels.hpp's rule, s.lr ignored) at the lr and first-step flag of the last
  // set_step_scalars.
  virtual void sgd_step(std::size_t n, float* p, const float* g, float* momentum_buf,
                        const SgdParams& s) = 0;
  // softmax_cross_entropy whose summed loss is added to a total in backend memory instead of
  // returned (no device-to-host sync per step); take_loss_sum returns that total and clears it.
  virtual void accumulate_loss(int n, int classes, const float* logits, const std::int32_t* labels,
                               float* dlogits, double grad_scale) = 0;
  virtual double take_loss_sum() = 0;
  // The stream every op runs on (a cudaStream_t), or nullptr for a host backend.
  virtual void* stream() const = 0;
  // The timeline's clock (trace.hpp): host time, or CUDA events on stream() with NVTX ranges.
  virtual std::unique_ptr<StampClock> make_stamp_clock() = 0;
  // SyncBatchNorm (--sync-bn): the training-mode BN ops call these exchanges (cpu_kernels.hpp);
  // nullptr turns it off. The caller keeps *sync alive while set.
  virtual void set_bn_sync(const BnSync* sync) = 0;
  // Mixed precision (--amp: fp16 and bf16 on the CUDA backend, bf16 on the oneDNN CPU backend
  // where the CPU has bf16 units; a UserError elsewhere unless Off). Convolutions and fc GEMMs
  // read 16-bit copies of their inputs and weights and accumulate in fp32 (on the GPU conv
  // outputs are rounded to 16 bits, as autocast's are; on the CPU they stay fp32); BN, loss, SGD
  // stay fp32 on fp32 master weights. loss_scale (device float, or nullptr): the loss gradient of
  // accumulate_loss is multiplied by it. skip_step (device float, or nullptr): sgd_step
  // leaves parameters and momentum untouched where it is != 0. Both must outlive the setting.
  virtual void set_amp(AmpMode mode, const float* loss_scale, const float* skip_step) = 0;

  // ---- The objects a step needs that only a backend with a stream has ------------------------
  // CUDA graphs of the training step on stream() (step_graph.hpp); inject_failure: the
  // --debug-fail-capture test seam. A host backend has no stream to capture: an internal error
  // (the communication plan never asks it: app/plan_communication.cpp).
  virtual std::unique_ptr<StepGraphs> make_step_graphs(CaptureHooks hooks, bool inject_failure);
  // --amp fp16's loss scaler in backend memory (grad_scaler.hpp); a host backend has none (the
  // flag rules refuse --amp fp16 on the CPU).
  virtual std::unique_ptr<GradScaler> make_grad_scaler(const LossScaleRule& rule);
};

// The reference CPU backend (im2col + OpenBLAS).
std::unique_ptr<Ops> make_cpu_ops();
// The oneDNN CPU backend on activations blocked by `block` channels (8: nChw8c, 16: nChw16c),
// or 0: dnnl_layout()'s block for this CPU.
std::unique_ptr<Ops> make_dnnl_ops(int block = 0);
// What the oneDNN backend runs on this CPU: the channel block oneDNN has JIT kernels for, for
// every convolution of the model (16 with AVX-512, 8 with AVX2), the implementations of the
// oneDNN primitives it runs ("jit:avx2", ...; distinct names, comma-separated), and which passes
// this project's own kernels take over at that block (`own`: "layer1 forward and filter gradient,
// layer2 filter gradient: mnist_ddp avx2" at block 8 and one thread per rank; at more, layer2's is
// oneDNN's); where no block has JIT kernels, block 16 and names that include oneDNN's reference
// "ref:any" (--cpu-kernels reference is faster then). Probed at batch 64.
// bf16_units: the CPU's bf16 units as oneDNN sees them ("AMX-BF16", "AVX512-BF16", "none");
// bf16 (asked for with amp = Bf16, where there are units): what --amp bf16 runs, e.g. "bf16
// jit_bf16:avx512_core_bf16; fp32 on bf16-rounded inputs: layer1 filter gradient".
struct DnnlLayout {
  int block = 16;
  std::string convolution;
  std::string own;  // this project's kernels run in oneDNN's place, named; empty where none
  std::string bf16_units = "none";
  std::string bf16;
};
DnnlLayout dnnl_layout(AmpMode amp = AmpMode::Off);
// The CPU as the kernels see it, for the start-up line: "AVX-512 with AVX512-BF16 (oneDNN),
// OpenBLAS Zen kernels", "aarch64 (NEON, SVE, SVE2, BF16) (oneDNN), OpenBLAS NEOVERSEV1 kernels".
std::string cpu_kernel_description();
// The CUDA backend (src/ops/cuda/); in a CPU-only build, a UserError saying "built without CUDA".
// The binary reaches it through the plugin's object (app/cuda_backend.hpp: cuda_plugin()), the
// test and benchmark binaries directly. It reads options.tf32 (TF32 tensor cores for convolutions
// and the fc GEMM, PyTorch's cuDNN default) and options.gpu_kernels (own: this project's kernels
// where it has them; they need tf32).
std::unique_ptr<Ops> make_cuda_ops(const BackendOptions& options);
// The registry (ops/registry.cpp): the CPU backend options.cpu_kernels names.
std::unique_ptr<Ops> make_cpu_backend(const BackendOptions& options = {});

// Threads for BLAS and oneDNN (OpenMP) on this rank; 1 unless this rank owns several cores.
void set_compute_threads(int threads);

}  // namespace mnist_ddp
