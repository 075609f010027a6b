// gpu_ops_bench.cpp — Google Benchmark timings of each GPU op of one training step at the ConvNet's
// shapes (batch 100, TF32 as the default run): where a step's device time goes, op by op. Each
// iteration launches the op kLaunches times back to back on the ops' stream and waits for them
// (a download: the legacy stream waits for the ops' stream), so a time is the op's device time
// or its launch cost, whichever is larger: what an eager step pays; a graph replay pays less of
// the launch. Needs a GPU ("no usable GPU" and exit 1 without one). Run:
//   build/bench/gpu_ops_bench [--benchmark_filter=...]      (tools/gpu-suite.sh step ops_gpu)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/launch/device.hpp"
#include "mnist_ddp/ops/ops.hpp"

namespace {

using namespace mnist_ddp;

constexpr int kBatch = 100;
constexpr int kLaunches = 50;  // per timed iteration
const ConvGeom kConv1{kBatch, 1, 28, 28, 16, 5, 2};
const ConvGeom kConv2{kBatch, 16, 14, 14, 32, 5, 2};
constexpr int kFcIn = 32 * 7 * 7, kClasses = 10;

// One device buffer of floats, filled from a fixed seed.
struct DeviceVec {
  Ops* ops = nullptr;
  float* p = nullptr;
  std::size_t n = 0;
  DeviceVec(Ops& o, std::size_t count, std::uint64_t seed, float lo = -1.f, float hi = 1.f)
      : ops(&o), n(count) {
    p = reinterpret_cast<float*>(o.alloc_bytes(count * sizeof(float)));
    SplitMix64 r(seed);
    std::vector<float> h(count);
    for (auto& x : h) x = static_cast<float>(r.uniform(lo, hi));
    o.upload(h.data(), p, count * sizeof(float));
  }
  ~DeviceVec() { ops->free_bytes(reinterpret_cast<std::uint8_t*>(p)); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
};

// The ops and every buffer of one step's worth of shapes, made once (cuDNN plans included).
struct Bench {
  std::unique_ptr<Ops> ops = make_cuda_ops({});
  // Layer 1: x1[N][1][28][28] -> c1[N][16][28][28] -> p1[N][16][14][14].
  DeviceVec x1{*ops, static_cast<std::size_t>(kBatch) * 784, 1};
  DeviceVec w1{*ops, 16 * 25, 2}, b1{*ops, 16, 3}, dw1{*ops, 16 * 25, 4}, db1{*ops, 16, 5};
  DeviceVec c1{*ops, static_cast<std::size_t>(kBatch) * 16 * 784, 6};
  DeviceVec dc1{*ops, c1.n, 7};
  DeviceVec p1{*ops, static_cast<std::size_t>(kBatch) * 16 * 196, 8}, dp1{*ops, p1.n, 9};
  // Layer 2: p1 -> c2[N][32][14][14] -> p2[N][32][7][7].
  DeviceVec w2{*ops, 32 * 16 * 25, 10}, b2{*ops, 32, 11}, dw2{*ops, w2.n, 12}, db2{*ops, 32, 13};
  DeviceVec c2{*ops, static_cast<std::size_t>(kBatch) * 32 * 196, 14}, dc2{*ops, c2.n, 15};
  DeviceVec p2{*ops, static_cast<std::size_t>(kBatch) * kFcIn, 16}, dp2{*ops, p2.n, 17};
  // BN parameters and statistics (gamma near 1, variance positive).
  DeviceVec gamma{*ops, 32, 18, 0.5f, 1.5f}, beta{*ops, 32, 19}, dgamma{*ops, 32, 20},
      dbeta{*ops, 32, 21};
  DeviceVec mean{*ops, 32, 22}, invstd{*ops, 32, 23, 0.5f, 2.f}, rm{*ops, 32, 24},
      rv{*ops, 32, 25, 0.5f, 2.f};
  std::uint8_t* arg1 = ops->alloc_bytes(p1.n);
  std::uint8_t* arg2 = ops->alloc_bytes(p2.n);
  // fc: rows[N][1568] -> logits[N][10].
  DeviceVec rows{*ops, p2.n, 26}, drows{*ops, p2.n, 27};
  DeviceVec wf{*ops, static_cast<std::size_t>(kClasses) * kFcIn, 28}, bf{*ops, kClasses, 29};
  DeviceVec dwf{*ops, wf.n, 30}, dbf{*ops, kClasses, 31};
  DeviceVec logits{*ops, static_cast<std::size_t>(kBatch) * kClasses, 32},
      dlogits{*ops, logits.n, 33};
  std::int32_t* labels = reinterpret_cast<std::int32_t*>(ops->alloc_bytes(kBatch * 4));
  // SGD over all parameters at once (the model's parameter count).
  static constexpr std::size_t kParams =
      16 * 25 + 16 + 32 * 16 * 25 + 32 + 2 * (16 + 32) + kClasses * kFcIn + kClasses;
  DeviceVec params{*ops, kParams, 34}, grads{*ops, kParams, 35}, momentum{*ops, kParams, 36};

  Bench() {
    std::vector<std::int32_t> h(kBatch);
    for (int i = 0; i < kBatch; ++i) h[static_cast<std::size_t>(i)] = i % kClasses;
    ops->upload(h.data(), labels, h.size() * sizeof(std::int32_t));
    // The argmax planes the backward reads: one forward of each pooling.
    ops->bn_relu_pool_forward(16, kBatch, 28, 28, c1.p, gamma.p, beta.p, mean.p, invstd.p, p1.p,
                              arg1);
    ops->bn_relu_pool_forward(32, kBatch, 14, 14, c2.p, gamma.p, beta.p, mean.p, invstd.p, p2.p,
                              arg2);
    ops->set_step_scalars({0, 0.01, false});
    sync();
  }
  ~Bench() {
    for (std::uint8_t* p : {arg1, arg2, reinterpret_cast<std::uint8_t*>(labels)})
      ops->free_bytes(p);
  }
  // Sync: a download on the legacy stream waits for everything queued on the ops' stream.
  void sync() {
    float f = 0;
    ops->download(b1.p, &f, sizeof(f));
  }
};

std::unique_ptr<Bench> g_bench;  // made and destroyed by main, around the benchmarks

Bench& bench() {
  return *g_bench;
}

// Times kLaunches back-to-back launches of op per iteration; reports the time per launch.
template <class F>
void time_op(benchmark::State& st, F op) {
  Bench& b = bench();
  op(b);  // warm-up: plans, algorithm choice, first-use allocations
  b.sync();
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kLaunches; ++i) op(b);
    b.sync();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    st.SetIterationTime(dt.count() / kLaunches);
  }
}

// The ops of one training step, in the order a step runs them.
struct GpuOp {
  const char* name;
  void (*run)(Bench&);
};
const GpuOp kOps[] = {
    {"Conv1Forward",
     [](Bench& b) { b.ops->conv2d_forward(kConv1, b.x1.p, b.w1.p, b.b1.p, b.c1.p); }},
    // A pass over the output of its own (Bn1Stats), and as a training step runs it: after the
    // direct convolution, from the partial moments that wrote (the pair's time).
    {"Bn1Stats",
     [](Bench& b) {
       b.ops->batchnorm_stats(16, kBatch, 784, b.c1.p, 1e-5, 0.1, b.mean.p, b.invstd.p, b.rm.p,
                              b.rv.p);
     }},
    {"Conv1Forward+Bn1Stats",
     [](Bench& b) {
       b.ops->conv2d_forward(kConv1, b.x1.p, b.w1.p, b.b1.p, b.c1.p);
       b.ops->batchnorm_stats(16, kBatch, 784, b.c1.p, 1e-5, 0.1, b.mean.p, b.invstd.p, b.rm.p,
                              b.rv.p);
     }},
    {"Bn1ReluPoolForward",
     [](Bench& b) {
       b.ops->bn_relu_pool_forward(16, kBatch, 28, 28, b.c1.p, b.gamma.p, b.beta.p, b.mean.p,
                                   b.invstd.p, b.p1.p, b.arg1);
     }},
    {"Conv2Forward",
     [](Bench& b) { b.ops->conv2d_forward(kConv2, b.p1.p, b.w2.p, b.b2.p, b.c2.p); }},
    {"Bn2Stats",
     [](Bench& b) {
       b.ops->batchnorm_stats(32, kBatch, 196, b.c2.p, 1e-5, 0.1, b.mean.p, b.invstd.p, b.rm.p,
                              b.rv.p);
     }},
    {"Bn2ReluPoolForward",
     [](Bench& b) {
       b.ops->bn_relu_pool_forward(32, kBatch, 14, 14, b.c2.p, b.gamma.p, b.beta.p, b.mean.p,
                                   b.invstd.p, b.p2.p, b.arg2);
     }},
    {"FcRows", [](Bench& b) { b.ops->to_fc_rows(32, kBatch, 49, b.p2.p, b.rows.p); }},
    {"FcForward",
     [](Bench& b) {
       b.ops->linear_forward(kBatch, kFcIn, kClasses, b.rows.p, b.wf.p, b.bf.p, b.logits.p);
     }},
    {"Loss",
     [](Bench& b) {
       b.ops->accumulate_loss(kBatch, kClasses, b.logits.p, b.labels, b.dlogits.p, 1.0 / kBatch);
     }},
    {"FcBackward",
     [](Bench& b) {
       b.ops->linear_backward(kBatch, kFcIn, kClasses, b.rows.p, b.wf.p, b.dlogits.p, b.drows.p,
                              b.dwf.p, b.dbf.p);
     }},
    {"Bn2ReluPoolBackward",
     [](Bench& b) {
       b.ops->bn_relu_pool_backward(32, kBatch, 14, 14, b.c2.p, b.p2.p, b.dp2.p, b.arg2, b.gamma.p,
                                    b.mean.p, b.invstd.p, true, b.dc2.p, b.dgamma.p, b.dbeta.p);
     }},
    {"Conv2BackwardFilter",
     [](Bench& b) { b.ops->conv2d_backward_filter(kConv2, b.p1.p, b.dc2.p, b.dw2.p, b.db2.p); }},
    {"Conv2BackwardData",
     [](Bench& b) { b.ops->conv2d_backward_data(kConv2, b.w2.p, b.dc2.p, b.dp1.p); }},
    // The call a step makes: both at once, the filter gradient on a second stream.
    {"Conv2BackwardBoth",
     [](Bench& b) {
       b.ops->conv2d_backward(kConv2, b.p1.p, b.w2.p, b.dc2.p, b.dw2.p, b.db2.p, b.dp1.p);
     }},
    {"Bn1ReluPoolBackward",
     [](Bench& b) {
       b.ops->bn_relu_pool_backward(16, kBatch, 28, 28, b.c1.p, b.p1.p, b.dp1.p, b.arg1, b.gamma.p,
                                    b.mean.p, b.invstd.p, true, b.dc1.p, b.dgamma.p, b.dbeta.p);
     }},
    {"Conv1BackwardFilter",
     [](Bench& b) { b.ops->conv2d_backward_filter(kConv1, b.x1.p, b.dc1.p, b.dw1.p, b.db1.p); }},
    {"Sgd",
     [](Bench& b) {
       b.ops->sgd_step(Bench::kParams, b.params.p, b.grads.p, b.momentum.p,
                       SgdParams{0.01, 0.9, 0, 0, false});
     }},
};

}  // namespace

int main(int argc, char** argv) {
  if (!cuda_built() || cuda_device_count() < 1) {
    std::fprintf(stderr, "gpu_ops_bench: error: no usable GPU (%s)\n",
                 cuda_built() ? "no CUDA device visible" : "built without CUDA");
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  use_cuda_device(0);
  g_bench = std::make_unique<Bench>();
  for (const GpuOp& op : kOps) {
    benchmark::RegisterBenchmark(op.name,
                                 [run = op.run](benchmark::State& st) { time_op(st, run); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // Teardown explicit, as in main: the buffers and ops (cuDNN/cuBLAS handles), then CUDA.
  g_bench.reset();
  release_cuda_device();
  return 0;
}
