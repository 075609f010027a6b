// comm_bench.cpp — the gradient path's communication, under mpirun (e.g. `mpirun -np 2
// build/bench/comm_bench`, or `make bench`): all-reduce bandwidth over message sizes for MPI and
// NCCL with nccl-tests' definitions (algbw = bytes / time; busbw = algbw * 2(n-1)/n), the result
// checked bit for bit after every iteration on every rank (an integer-valued pattern that depends
// on the element and the rank, whose float sums are exact: a wrong, lost or misplaced chunk shows;
// at the end each rank's count of wrong elements is gathered and rank 0 names the ranks and hosts
// that got a wrong answer: exit 1. MNIST_DDP_TEST_CORRUPT_ALLREDUCE=R makes rank R's result wrong
// in one element, the check's own test), and
// the cost of the compression hooks: fp16/bf16 encode + decode of the model's gradient arena, and
// one PowerSGD reduction of it (all three variants) against the plain all-reduce.
// Every rank runs the same fixed number of iterations; an iteration's time is the slowest rank's.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/compress.hpp"
#include "mnist_ddp/comm/flight_recorder.hpp"
#include "mnist_ddp/comm/reducer.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/launch/device.hpp"
#include "mnist_ddp/launch/identity.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/trace/trace.hpp"

namespace {

using namespace mnist_ddp;
using Clock = std::chrono::steady_clock;

Comm* g_mpi = nullptr;   // set in main, for the job's lifetime
Comm* g_nccl = nullptr;  // nullptr without a GPU

double slowest(double seconds) {
  // Collective (outside the timed region): the iteration took as long as its slowest rank.
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

// The result check. Element i of rank r is (7 i + 13 r) mod 1021: integers below 2^10, so every
// partial sum of up to 2^14 ranks is an integer below 2^24 and exact in float whatever order the
// reduction adds in; the expected sum is computed in integers.
float pattern(std::size_t i, int rank) {
  return static_cast<float>(
      (7 * static_cast<std::uint64_t>(i) + 13 * static_cast<std::uint64_t>(rank)) % 1021);
}
void fill_pattern(std::span<float> x, int rank) {
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = pattern(i, rank);
}
struct ResultCheck {
  std::int64_t checked = 0;  // elements compared on this rank
  std::int64_t wrong = 0;    // of them, not the exact sum
  std::int64_t first = -1;   // the first wrong element's index (of the first wrong result)
  float got = 0, want = 0;
};
ResultCheck g_check;
// The test seam's rank; -1 when unset or not a rank number (atoi would read "x" as rank 0).
int corrupt_rank() {
  const char* v = std::getenv("MNIST_DDP_TEST_CORRUPT_ALLREDUCE");
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long r = std::strtol(v, &end, 10);
  return *end == '\0' && r >= 0 && r < (1L << 20) ? static_cast<int>(r) : -1;
}
// Compares x (an all-reduce sum of fill_pattern over `world` ranks) with the exact sums, bit for
// bit; the test seam first makes this rank's result wrong in its middle element.
void check_sum(std::span<float> x, int world, int rank) {
  if (rank == corrupt_rank() && !x.empty()) x[x.size() / 2] += 1.0f;
  // The exact sum depends on i mod 1021 only: one table of the 1021 sums, in integers.
  std::vector<float> sums(1021);
  for (std::size_t k = 0; k < sums.size(); ++k) {
    std::uint64_t want = 0;
    for (int r = 0; r < world; ++r) want += static_cast<std::uint64_t>(pattern(k, r));
    sums[k] = static_cast<float>(want);
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float w = sums[i % sums.size()];
    if (x[i] != w) {
      if (g_check.first < 0) {
        g_check.first = static_cast<std::int64_t>(i);
        g_check.got = x[i];
        g_check.want = w;
      }
      ++g_check.wrong;
    }
  }
  g_check.checked += static_cast<std::int64_t>(x.size());
}

// Collective (at the end, every rank): each rank's check gathered to rank 0, which prints one line
// per rank that got a wrong answer (rank, host, how many, the first) or one line that all were
// exact. Returns the exit status: 1 when any rank got a wrong answer.
int report_result_check() {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::array<char, 64> host{};
  gethostname(host.data(), host.size() - 1);
  const std::array<double, 5> mine = {
      static_cast<double>(g_check.checked), static_cast<double>(g_check.wrong),
      static_cast<double>(g_check.first), g_check.got, g_check.want};
  std::vector<double> all(5 * static_cast<std::size_t>(world));
  std::vector<char> hosts(64 * static_cast<std::size_t>(world));
  MPI_Gather(mine.data(), 5, MPI_DOUBLE, all.data(), 5, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Gather(host.data(), 64, MPI_CHAR, hosts.data(), 64, MPI_CHAR, 0, MPI_COMM_WORLD);
  int bad = 0;
  if (rank == 0) {
    double checked = 0;
    for (int r = 0; r < world; ++r) {
      const double* v = &all[5 * static_cast<std::size_t>(r)];
      checked += v[0];
      if (v[1] == 0) continue;
      ++bad;
      std::printf(
          "all-reduce result check: WRONG on rank %d (host %s): %.0f of %.0f elements differ from "
          "the exact sum, the first at element %.0f (got %.9g, want %.9g)\n",
          r, &hosts[64 * static_cast<std::size_t>(r)], v[1], v[0], v[2], v[3], v[4]);
    }
    if (bad == 0) {
      std::printf("all-reduce result check: exact on all %d rank(s) (%.0f elements compared)\n",
                  world, checked);
    }
    std::fflush(stdout);
  }
  // Collective: every rank exits with rank 0's verdict.
  MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return bad > 0 ? 1 : 0;
}

void set_bandwidth(benchmark::State& st, std::size_t bytes, int ranks, double seconds) {
  const double algbw = static_cast<double>(bytes) * static_cast<double>(st.iterations()) / seconds;
  st.counters["algbw_GBps"] = algbw / 1e9;
  st.counters["busbw_GBps"] = algbw * 2.0 * (ranks - 1) / ranks / 1e9;
}

void BM_AllreduceMpi(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0)) / sizeof(float);
  Comm& c = *g_mpi;
  std::vector<float> buf(n);
  double total = 0;
  const std::int64_t wrong_before = g_check.wrong;
  for (auto _ : st) {
    fill_pattern(buf, c.rank());
    const auto t0 = Clock::now();
    c.allreduce(std::span<float>(buf), ReduceOp::Sum);
    const double t = slowest(std::chrono::duration<double>(Clock::now() - t0).count());
    st.SetIterationTime(t);
    total += t;
    check_sum(buf, c.size(), c.rank());  // outside the timed region
  }
  if (g_check.wrong != wrong_before) st.SkipWithError("result check failed: wrong all-reduce sums");
  set_bandwidth(st, n * sizeof(float), c.size(), total);
}

void BM_AllreduceNccl(benchmark::State& st) {
  if (g_nccl == nullptr) {
    st.SkipWithError("no GPU (NCCL all-reduce needs one GPU per rank)");
    return;
  }
  const auto n = static_cast<std::size_t>(st.range(0)) / sizeof(float);
  Comm& c = *g_nccl;
  auto* dev = static_cast<float*>(cuda_alloc(n * sizeof(float)));
  std::vector<float> host(n);
  auto ops = make_cuda_ops({});
  double total = 0;
  const std::int64_t wrong_before = g_check.wrong;
  for (auto _ : st) {
    fill_pattern(host, c.rank());
    ops->upload(host.data(), dev, n * sizeof(float));
    const auto t0 = Clock::now();
    c.allreduce(std::span<float>(dev, n), ReduceOp::Sum);  // unbound NcclComm: synchronous
    const double t = slowest(std::chrono::duration<double>(Clock::now() - t0).count());
    st.SetIterationTime(t);
    total += t;
    ops->download(dev, host.data(), n * sizeof(float));  // outside the timed region
    check_sum(host, c.size(), c.rank());
  }
  cuda_free(dev);
  if (g_check.wrong != wrong_before) st.SkipWithError("result check failed: wrong all-reduce sums");
  set_bandwidth(st, n * sizeof(float), c.size(), total);
}

// The model's gradient arena (29,034 floats) as the hooks see it.
std::vector<float> arena() {
  std::vector<float> g(29034);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.001f * static_cast<float>(i));
  return g;
}

void BM_Encode16Decode16(benchmark::State& st) {
  const auto c = static_cast<Compression>(st.range(0));
  const auto g = arena();
  std::vector<std::uint16_t> h(g.size());
  std::vector<float> back(g.size());
  for (auto _ : st) {
    encode16(g, h, c);
    decode16(h, back, c);
    benchmark::DoNotOptimize(back.data());
  }
  st.SetLabel(to_string(c));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * g.size() * sizeof(float)));
}

// One reduction of the whole arena through the Reducer (after backward, no overlap), per hook.
void BM_HookReduce(benchmark::State& st) {
  const auto c = static_cast<Compression>(st.range(0));
  auto ops = make_cpu_backend();
  ConvNet model(*ops, 1);
  model.init(1);
  Reducer red(*g_mpi, model, 25 * 1024, false, c, PowerSgdConfig{2, 0, 2.0});
  const auto g = arena();
  double total = 0;
  for (auto _ : st) {
    std::copy(g.begin(), g.end(), model.grads().begin());
    const auto t0 = Clock::now();
    red.finish();
    red.count_step();
    const double t = slowest(std::chrono::duration<double>(Clock::now() - t0).count());
    st.SetIterationTime(t);
    total += t;
  }
  const ReducerStats s = red.take_stats();
  st.SetLabel(to_string(c));
  st.counters["bytes_per_step"] =
      static_cast<double>(s.payload_bytes) / static_cast<double>(s.steps);
}

// The flight recorder's cost per collective (--flight-recorder, always on): one entry begun
// and ended in a 2000-entry ring, the work watch_begin/watch_end add to every collective. Local
// to each rank (no MPI). bench/observability_cost.sh turns it into a fraction of a step.
void BM_FlightRecord(benchmark::State& st) {
  FlightRecorder rec(g_mpi->rank(), g_mpi->size(), "bench");
  rec.arm(2000, "", SIGUSR2);
  FlightRing* ring = rec.open("world", g_mpi->size());
  std::uint64_t seq = 0;
  for (auto _ : st) {
    ++seq;
    ring->begin(seq, "allreduce", 15770, DType::F32);
    ring->end(seq, FlightState::Completed);
  }
  benchmark::DoNotOptimize(seq);
}

// The timeline's cost per span (--trace, trace.hpp): arg 0 = tracing off (what every run pays:
// one branch per span), 1 = on and inside the window (two host stamps and the span's record),
// each step of 64 spans read back as the trainer does. bench/trace_cost.sh turns it into a
// fraction of a step.
void BM_TraceSpan(benchmark::State& st) {
  const bool on = st.range(0) != 0;
  const std::unique_ptr<StampClock> clock = make_host_stamp_clock();
  Tracer tracer(*clock, on, TraceWindow{0, std::int64_t{1} << 62});
  std::int64_t step = 0;
  int in_step = 0;
  tracer.begin_step(step, false);
  for (auto _ : st) {
    {
      const TraceScope span(&tracer, "forward layer1", Track::Compute, SpanArgs{.layer = "layer1"});
    }
    if (++in_step == 64) {
      tracer.end_step(Tracer::Ran::Eager, 100);
      tracer.begin_step(++step, false);
      in_step = 0;
    }
  }
  benchmark::DoNotOptimize(tracer.events().size());
}

BENCHMARK(BM_AllreduceMpi)
    ->RangeMultiplier(4)
    ->Range(4 << 10, 16 << 20)
    ->Iterations(50)
    ->UseManualTime();
BENCHMARK(BM_AllreduceNccl)
    ->RangeMultiplier(4)
    ->Range(4 << 10, 16 << 20)
    ->Iterations(50)
    ->UseManualTime();
BENCHMARK(BM_FlightRecord);
BENCHMARK(BM_TraceSpan)->Arg(0)->Arg(1)->Iterations(640000);  // on: 10,000 steps of events
BENCHMARK(BM_Encode16Decode16)
    ->Arg(static_cast<int>(Compression::Fp16))
    ->Arg(static_cast<int>(Compression::Bf16));
BENCHMARK(BM_HookReduce)
    ->Arg(static_cast<int>(Compression::None))
    ->Arg(static_cast<int>(Compression::PowerSgd))
    ->Arg(static_cast<int>(Compression::PowerSgdFp16))
    ->Arg(static_cast<int>(Compression::BatchedPowerSgdFp16))
    ->Iterations(200)
    ->UseManualTime();

// Ranks other than 0 run every benchmark in lockstep but print nothing.
class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  mpi_init(&argc, &argv);
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  // Ranks other than 0 drop --benchmark_out*: the file is rank 0's results, never another's.
  if (me != 0) {
    int kept = 1;
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]).rfind("--benchmark_out", 0) != 0) argv[kept++] = argv[i];
    argc = kept;
  }
  benchmark::Initialize(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = 0;
  {
    std::unique_ptr<Comm> mpi = make_mpi_comm();
    g_mpi = mpi.get();
    std::unique_ptr<Comm> nccl;
    int local = 0;
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    int local_size = 1;
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    // NCCL only with one GPU per node-local rank (the same verdict on every rank of a node).
    int gpus = cuda_device_count() >= local_size ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &gpus, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (gpus == 1) {
      use_cuda_device(local);
      nccl = make_nccl_comm();
      g_nccl = nccl.get();
    }
    SilentReporter silent;
    if (rank == 0) {
      benchmark::RunSpecifiedBenchmarks();
    } else {
      benchmark::RunSpecifiedBenchmarks(&silent);
    }
    benchmark::Shutdown();
    code = report_result_check();  // collective
    g_nccl = nullptr;
    g_mpi = nullptr;
    // Teardown order: NCCL, then CUDA, then MPI.
    nccl.reset();
    release_cuda_device();
    mpi.reset();
  }
  MPI_Finalize();
  return code;
}
