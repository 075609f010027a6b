// ops_bench.cpp — Google Benchmark microbenchmarks of the CPU ops at the ConvNet's shapes
// (batch 100), a full forward+backward step, and the single-core SGEMM rate that defines the
// compute floor (16.4 MFLOP per training image, DESIGN.md §1). Run: make bench.
#include <benchmark/benchmark.h>

#include <cblas.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mnist_ddp/base/half.hpp"
#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "ops/cpu/blocked_ops.hpp"
#include "ops/cpu/cpu_kernels.hpp"
#include "ops/cpu/dnnl_bf16.hpp"

namespace {

using mnist_ddp::ConvGeom;
using mnist_ddp::SplitMix64;

std::vector<float> random_vec(std::size_t n, std::uint64_t seed) {
  SplitMix64 r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = r.uniform(-1, 1);
  return v;
}

constexpr int kBatch = 100;
const ConvGeom kConv1{kBatch, 1, 28, 28, 16, 5, 2};
const ConvGeom kConv2{kBatch, 16, 14, 14, 32, 5, 2};

ConvGeom geom(int which, int chunk) {
  ConvGeom g = which == 1 ? kConv1 : kConv2;
  g.chunk = chunk;
  return g;
}

// Square SGEMM: the machine's single-core GEMM rate (the floor's denominator).
void BM_Sgemm(benchmark::State& st) {
  const int n = static_cast<int>(st.range(0));
  auto a = random_vec(static_cast<std::size_t>(n) * n, 1), b = random_vec(a.size(), 2);
  std::vector<float> c(a.size());
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n,
                0.f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Sgemm)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);

void conv_counters(benchmark::State& st, const ConvGeom& g, int gemms) {
  const double flop = 2.0 * g.k * g.c * g.r * g.r * g.out_h() * g.out_w() * g.n * gemms;
  st.counters["GFLOP/s"] = benchmark::Counter(flop, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

// Args: layer (1|2), images per im2col chunk (0: auto).
void BM_ConvForward(benchmark::State& st) {
  const ConvGeom g = geom(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  auto x = random_vec(static_cast<std::size_t>(g.c) * g.n * g.h * g.w, 1);
  auto w = random_vec(static_cast<std::size_t>(g.k) * g.c * g.r * g.r, 2);
  auto b = random_vec(g.k, 3);
  std::vector<float> y(static_cast<std::size_t>(g.k) * g.n * g.out_h() * g.out_w());
  std::vector<float> work(mnist_ddp::cpu::conv2d_workspace(g));
  for (auto _ : st)
    mnist_ddp::cpu::conv2d_forward(g, x.data(), w.data(), b.data(), y.data(), work.data());
  conv_counters(st, g, 1);
}
BENCHMARK(BM_ConvForward)->ArgsProduct({{1, 2}, {0, 1, 4, 10, 25}})->Unit(benchmark::kMillisecond);

void BM_ConvBackwardFilter(benchmark::State& st) {
  const ConvGeom g = geom(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  auto x = random_vec(static_cast<std::size_t>(g.c) * g.n * g.h * g.w, 1);
  auto dy = random_vec(static_cast<std::size_t>(g.k) * g.n * g.out_h() * g.out_w(), 2);
  std::vector<float> dw(static_cast<std::size_t>(g.k) * g.c * g.r * g.r), db(g.k);
  std::vector<float> work(mnist_ddp::cpu::conv2d_workspace(g));
  for (auto _ : st)
    mnist_ddp::cpu::conv2d_backward_filter(g, x.data(), dy.data(), dw.data(), db.data(),
                                           work.data());
  conv_counters(st, g, 1);
}
BENCHMARK(BM_ConvBackwardFilter)
    ->ArgsProduct({{1, 2}, {0, 1, 4, 10, 25}})
    ->Unit(benchmark::kMillisecond);

void BM_ConvBackwardData(benchmark::State& st) {
  const ConvGeom g = geom(2, static_cast<int>(st.range(0)));
  auto w = random_vec(static_cast<std::size_t>(g.k) * g.c * g.r * g.r, 2);
  auto dy = random_vec(static_cast<std::size_t>(g.k) * g.n * g.out_h() * g.out_w(), 2);
  std::vector<float> dx(static_cast<std::size_t>(g.c) * g.n * g.h * g.w);
  std::vector<float> work(mnist_ddp::cpu::conv2d_workspace(g));
  for (auto _ : st)
    mnist_ddp::cpu::conv2d_backward_data(g, w.data(), dy.data(), dx.data(), work.data());
  conv_counters(st, g, 1);
}
BENCHMARK(BM_ConvBackwardData)
    ->Arg(0)
    ->Arg(1)
    ->Arg(4)
    ->Arg(10)
    ->Arg(25)
    ->Unit(benchmark::kMillisecond);

// The fused BN -> ReLU -> pool kernels of both CPU layouts: 0 = reference [C][N][H][W] (cpu_ops),
// 1 = oneDNN backend's blocked [N][C/B][H][W][B] (blocked_ops). Same data sizes either way.
struct BnKernels {
  const char* label;
  void (*stats)(int, int, int, const float*, double, double, float*, float*, float*, float*,
                const mnist_ddp::BnSync*);
  void (*forward)(int, int, int, int, const float*, const float*, const float*, const float*,
                  const float*, float*, std::uint8_t*);
  void (*backward)(int, int, int, int, const float*, const float*, const float*,
                   const std::uint8_t*, const float*, const float*, const float*, bool, float*,
                   float*, float*, const mnist_ddp::BnSync*);
};
void reference_stats(int c, int n, int hw, const float* x, double eps, double m, float* mean,
                     float* is, float* rm, float* rv, const mnist_ddp::BnSync* sync) {
  mnist_ddp::cpu::batchnorm_stats(c, static_cast<std::size_t>(n) * hw, x, eps, m, mean, is, rm, rv,
                                  sync);
}
// The blocked kernels at this CPU's block (the oneDNN backend's: 16 with AVX-512, 8 with AVX2),
// probed on first use (not at static initialisation, before main).
int cpu_block() {
  static const int block = mnist_ddp::dnnl_layout().block;
  return block;
}
void blocked_stats(int c, int n, int hw, const float* x, double eps, double m, float* mean,
                   float* is, float* rm, float* rv, const mnist_ddp::BnSync* sync) {
  mnist_ddp::blocked::batchnorm_stats(cpu_block(), c, n, hw, x, eps, m, mean, is, rm, rv, sync);
}
void blocked_forward(int c, int n, int h, int w, const float* x, const float* gamma,
                     const float* beta, const float* mean, const float* invstd, float* y,
                     std::uint8_t* arg) {
  mnist_ddp::blocked::bn_relu_pool_forward(cpu_block(), c, n, h, w, x, gamma, beta, mean, invstd, y,
                                           arg);
}
void blocked_backward(int c, int n, int h, int w, const float* x, const float* y, const float* dy,
                      const std::uint8_t* arg, const float* gamma, const float* mean,
                      const float* invstd, bool batch_stats, float* dx, float* dgamma, float* dbeta,
                      const mnist_ddp::BnSync* sync) {
  mnist_ddp::blocked::bn_relu_pool_backward(cpu_block(), c, n, h, w, x, y, dy, arg, gamma, mean,
                                            invstd, batch_stats, dx, dgamma, dbeta, sync);
}
const BnKernels kBnKernels[] = {
    {"reference", reference_stats, mnist_ddp::cpu::bn_relu_pool_forward<float>,
     mnist_ddp::cpu::bn_relu_pool_backward<float>},
    {"blocked", blocked_stats, blocked_forward, blocked_backward}};

// Args: layout (0|1), channels, side (16x28 for layer1, 32x14 for layer2).
void BM_BnReluPool(benchmark::State& st, bool backward) {
  const BnKernels& k = kBnKernels[st.range(0)];
  const int c = static_cast<int>(st.range(1)), s = static_cast<int>(st.range(2));
  const std::size_t m = static_cast<std::size_t>(kBatch) * s * s;
  auto x = random_vec(c * m, 1), gamma = random_vec(c, 2), beta = random_vec(c, 3);
  auto dy = random_vec(c * m / 4, 4);
  std::vector<float> mean(c), invstd(c), rm(c), rv(c, 1.f), y(c * m / 4), dx(c * m), dg(c), db(c);
  std::vector<std::uint8_t> arg(c * m / 4);
  k.stats(c, kBatch, s * s, x.data(), 1e-5, 0.1, mean.data(), invstd.data(), rm.data(), rv.data(),
          nullptr);
  k.forward(c, kBatch, s, s, x.data(), gamma.data(), beta.data(), mean.data(), invstd.data(),
            y.data(), arg.data());
  for (auto _ : st) {
    if (backward) {
      k.backward(c, kBatch, s, s, x.data(), y.data(), dy.data(), arg.data(), gamma.data(),
                 mean.data(), invstd.data(), true, dx.data(), dg.data(), db.data(), nullptr);
    } else {
      k.stats(c, kBatch, s * s, x.data(), 1e-5, 0.1, mean.data(), invstd.data(), rm.data(),
              rv.data(), nullptr);
      k.forward(c, kBatch, s, s, x.data(), gamma.data(), beta.data(), mean.data(), invstd.data(),
                y.data(), arg.data());
    }
  }
  st.SetLabel(k.label);
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * c * m * sizeof(float)));
}
BENCHMARK_CAPTURE(BM_BnReluPool, forward, false)
    ->ArgsProduct({{0, 1}, {16}, {28}})
    ->Args({0, 32, 14})
    ->Args({1, 32, 14})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_BnReluPool, backward, true)
    ->ArgsProduct({{0, 1}, {16}, {28}})
    ->Args({0, 32, 14})
    ->Args({1, 32, 14})
    ->Unit(benchmark::kMicrosecond);

// One convolution's inputs and outputs for the oneDNN benchmarks, in the backend's blocked layout:
// channels rounded up to the widest block (16), room for any blocked layout's padding.
struct ConvBuffers {
  explicit ConvBuffers(const ConvGeom& g)
      : x(random_vec(padded(g.c) * g.n * g.h * g.w, 1)),
        w(random_vec(static_cast<std::size_t>(g.k) * g.c * g.r * g.r, 2)),
        b(random_vec(g.k, 3)),
        y(random_vec(padded(g.k) * g.n * g.out_h() * g.out_w(), 4)),
        dw(w.size()),
        db(b.size()),
        dx(x.size()) {}
  static std::size_t padded(int c) { return static_cast<std::size_t>((c + 15) / 16 * 16); }
  std::vector<float> x, w, b, y, dw, db, dx;
};

// The oneDNN backend's convolutions through the Ops interface, at this CPU's blocked layout
// (nChw16c with AVX-512, nChw8c with AVX2 or ONEDNN_MAX_CPU_ISA=AVX2): what the default CPU path
// runs (the BM_Conv* above are the reference im2col + OpenBLAS kernels).
// Args: layer (1|2), direction (0 forward, 1 backward-filter, 2 backward-data; layer 2 only).
void BM_OneDnnConv(benchmark::State& st) {
  auto ops = mnist_ddp::make_cpu_backend({.cpu_kernels = mnist_ddp::CpuKernels::OneDnn});
  const ConvGeom g = geom(static_cast<int>(st.range(0)), 0);
  const int dir = static_cast<int>(st.range(1));
  ConvBuffers m(g);
  for (auto _ : st) {
    if (dir == 0) ops->conv2d_forward(g, m.x.data(), m.w.data(), m.b.data(), m.y.data());
    if (dir == 1) ops->conv2d_backward_filter(g, m.x.data(), m.y.data(), m.dw.data(), m.db.data());
    if (dir == 2) ops->conv2d_backward_data(g, m.w.data(), m.y.data(), m.dx.data());
  }
  const mnist_ddp::DnnlLayout l = mnist_ddp::dnnl_layout();
  st.SetLabel(l.convolution + " block " + std::to_string(l.block));
  conv_counters(st, g, 1);
}
BENCHMARK(BM_OneDnnConv)
    ->Args({1, 0})
    ->Args({1, 1})
    ->Args({2, 0})
    ->Args({2, 1})
    ->Args({2, 2})
    ->Unit(benchmark::kMillisecond);

// oneDNN's bf16 matmul (bf16 inputs, fp32 accumulation and output) on one core at n x n x n: the
// bf16 GEMM-rate reference of bench/compare_precision.sh, beside BM_Sgemm's fp32 one. Skipped
// without bf16 units.
void BM_Bf16Matmul(benchmark::State& st) {
  if (mnist_ddp::bf16::cpu_units() == mnist_ddp::bf16::Units::None) {
    st.SkipWithError("no bf16 units on this CPU");
    return;
  }
  using dnnl::memory;
  const memory::dim n = st.range(0);
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc a_md({n, n}, memory::data_type::bf16, memory::format_tag::ab),
      c_md({n, n}, memory::data_type::f32, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, a_md, c_md), engine);
  const dnnl::matmul mm(pd);
  memory a(a_md, engine), b(a_md, engine), c(c_md, engine);
  std::memset(a.get_data_handle(), 0x3f, static_cast<std::size_t>(n * n) * 2);  // 0.75-ish
  std::memset(b.get_data_handle(), 0x3f, static_cast<std::size_t>(n * n) * 2);
  for (auto _ : st) {
    mm.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  }
  st.SetLabel(pd.impl_info_str());
  st.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Bf16Matmul)->Arg(1024)->Unit(benchmark::kMillisecond);

// The convolutions' passes in bf16 (--amp bf16): oneDNN's bf16 primitive with its conversions in
// and out (every pass, whether or not bf16::runs_bf16 picks it), beside BM_OneDnnConv's fp32 ones:
// the measurements behind runs_bf16's exceptions. Args as BM_OneDnnConv's. Skipped without bf16
// units.
void BM_OneDnnConvBf16(benchmark::State& st) {
  namespace bf16 = mnist_ddp::bf16;
  if (bf16::cpu_units() == bf16::Units::None) {
    st.SkipWithError("no bf16 units on this CPU");
    return;
  }
  const ConvGeom g = geom(static_cast<int>(st.range(0)), 0);
  const int dir = static_cast<int>(st.range(1));
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  bf16::Conv conv(engine, g, bf16::cpu_units(), bf16::Pick::EveryOneDnn);
  const bf16::Pass pass = dir == 0   ? bf16::Pass::Forward
                          : dir == 1 ? bf16::Pass::BackwardWeights
                                     : bf16::Pass::BackwardData;
  if (!conv.bf16(pass)) {
    st.SkipWithError("oneDNN has no JIT bf16 kernel for this pass");
    return;
  }
  ConvBuffers m(g);
  for (auto _ : st) {
    if (dir == 0) conv.forward(stream, m.x.data(), m.w.data(), m.b.data(), m.y.data());
    if (dir == 1) conv.backward_weights(stream, m.x.data(), m.y.data(), m.dw.data(), m.db.data());
    if (dir == 2) conv.backward_data(stream, m.w.data(), m.y.data(), m.dx.data());
  }
  st.SetLabel(conv.impl(pass) + (bf16::runs_bf16(g, pass, bf16::cpu_units(), conv.impl(pass))
                                     ? " (runs under --amp bf16)"
                                     : " (fp32 runs under --amp bf16)"));
  conv_counters(st, g, 1);
}
BENCHMARK(BM_OneDnnConvBf16)
    ->Args({1, 0})
    ->Args({1, 1})
    ->Args({2, 0})
    ->Args({2, 1})
    ->Args({2, 2})
    ->Unit(benchmark::kMillisecond);

// Layer1's bf16 passes as ours (conv1_bf16.hpp: what --amp bf16 runs at one thread per rank on
// AVX512-BF16) against oneDNN's bf16 primitive, interleaved in each iteration so both see the
// same machine: the time is ours; oneDNN_ms is oneDNN's and x_oneDNN the ratio oneDNN / ours. The
// filter gradient reads dy's bf16 copy in both, as in training. Arg: 0 forward, 1 filter
// gradient. Skipped where ours do not run (no AVX512-BF16 in this build or CPU, or AMX).
void BM_Bf16ImageConv(benchmark::State& st) {
  namespace bf16 = mnist_ddp::bf16;
  const ConvGeom g = kConv1;
  const bool forward = st.range(0) == 0;
  const bf16::Pass pass = forward ? bf16::Pass::Forward : bf16::Pass::BackwardWeights;
  if (!bf16::runs_ours(g, pass, bf16::cpu_units())) {
    st.SkipWithError("ours do not run here (no AVX512-BF16 in this build or CPU, or AMX)");
    return;
  }
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  bf16::Conv ours(engine, g, bf16::cpu_units(), bf16::Pick::OneThread);
  bf16::Conv theirs(engine, g, bf16::cpu_units(), bf16::Pick::EveryOneDnn);
  ConvBuffers m(g);
  std::vector<std::uint16_t> dy16(m.y.size());
  mnist_ddp::to_bf16(dy16.size(), m.y.data(), dy16.data());
  const auto run = [&](bf16::Conv& c) {
    if (forward) return c.forward(stream, m.x.data(), m.w.data(), m.b.data(), m.y.data());
    c.backward(stream, m.x.data(), m.w.data(), m.y.data(), m.dw.data(), m.db.data(), nullptr,
               dy16.data());
  };
  run(ours);
  run(theirs);
  using Clock = std::chrono::steady_clock;
  double ours_s = 0, theirs_s = 0;
  for (auto _ : st) {
    const auto t0 = Clock::now();
    run(theirs);
    const auto t1 = Clock::now();
    run(ours);
    const auto t2 = Clock::now();
    theirs_s += std::chrono::duration<double>(t1 - t0).count();
    const double mine = std::chrono::duration<double>(t2 - t1).count();
    ours_s += mine;
    st.SetIterationTime(mine);
  }
  st.SetLabel(ours.impl(pass) + " vs " + theirs.impl(pass));
  st.counters["oneDNN_ms"] = benchmark::Counter(1e3 * theirs_s, benchmark::Counter::kAvgIterations);
  st.counters["x_oneDNN"] = ours_s > 0 ? theirs_s / ours_s : 0;
  conv_counters(st, g, 1);
}
BENCHMARK(BM_Bf16ImageConv)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// One full forward + backward of the model at batch 100 (no communication, no optimizer) on
// each CPU backend: this is the benchmark behind choosing oneDNN over im2col + OpenBLAS.
// Arg: 0 = oneDNN, 1 = reference, 2 = oneDNN under --amp bf16 (skipped without bf16 units).
void BM_ModelStep(benchmark::State& st) {
  auto ops = mnist_ddp::make_cpu_backend({.cpu_kernels = st.range(0) == 1
                                                             ? mnist_ddp::CpuKernels::Reference
                                                             : mnist_ddp::CpuKernels::OneDnn});
  st.SetLabel(st.range(0) == 0 ? "onednn" : st.range(0) == 1 ? "reference" : "onednn bf16");
  if (st.range(0) == 2) {
    if (mnist_ddp::bf16::cpu_units() == mnist_ddp::bf16::Units::None) {
      st.SkipWithError("no bf16 units on this CPU");
      return;
    }
    ops->set_amp(mnist_ddp::AmpMode::Bf16, nullptr, nullptr);
  }
  mnist_ddp::ConvNet model(*ops, kBatch);
  model.init(1);
  auto x = random_vec(static_cast<std::size_t>(kBatch) * 784, 5);
  std::vector<std::int32_t> y(kBatch);
  for (int i = 0; i < kBatch; ++i) y[i] = i % 10;
  std::vector<float> dl(kBatch * 10);
  for (auto _ : st) {
    const float* logits = model.forward(x.data(), kBatch, mnist_ddp::Mode::Train);
    ops->softmax_cross_entropy(kBatch, 10, logits, y.data(), dl.data(), 1.0 / kBatch);
    model.backward(dl.data(), nullptr);
  }
  st.counters["img/s"] = benchmark::Counter(kBatch, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] = benchmark::Counter(
      16.4e6 * kBatch, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_ModelStep)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  mnist_ddp::set_compute_threads(1);  // per-rank, single core: the configuration the floor is for
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
