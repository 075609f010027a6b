// model_test.cpp — the ConvNet's PyTorch parameter names/shapes, default init, and its full
// backward against finite differences of the whole network (float, frozen and training BN).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../common/compare.hpp"
#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/comm/reducer.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"

#include "test_util.hpp"

namespace mnist_ddp {
namespace {

TEST(ConvNet, PyTorchStateDictNamesAndShapes) {
  auto ops = make_cpu_ops();
  ConvNet m(*ops, 2);
  const std::vector<std::pair<std::string, std::vector<int>>> want = {
      {"layer1.0.weight", {16, 1, 5, 5}},  {"layer1.0.bias", {16}},
      {"layer1.1.weight", {16}},           {"layer1.1.bias", {16}},
      {"layer2.0.weight", {32, 16, 5, 5}}, {"layer2.0.bias", {32}},
      {"layer2.1.weight", {32}},           {"layer2.1.bias", {32}},
      {"fc.weight", {10, 1568}},           {"fc.bias", {10}}};
  ASSERT_EQ(m.param_entries().size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(m.param_entries()[i].name, want[i].first);
    EXPECT_EQ(m.param_entries()[i].shape, want[i].second);
  }
  EXPECT_EQ(m.params().size(), 29034u);  // sum(p.numel() for p in ConvNet().parameters())
  EXPECT_EQ(m.buffers().size(), 96u);
  // Layer ranges tile the arena in order: layer1, layer2, fc.
  EXPECT_EQ(m.layer_range(0).first, 0u);
  EXPECT_EQ(m.layer_range(1).first, m.layer_range(0).second);
  EXPECT_EQ(m.layer_range(2).first + m.layer_range(2).second, m.params().size());
}

TEST(ConvNet, DefaultInitBoundsAndDeterminism) {
  auto ops = make_cpu_ops();
  ConvNet a(*ops, 2), b(*ops, 2);
  a.init(9);
  b.init(9);
  EXPECT_TRUE(std::equal(a.params().begin(), a.params().end(), b.params().begin()));
  for (const auto& e : a.param_entries()) {
    const float* p = a.params().data() + e.offset;
    if (e.name.find(".1.") != std::string::npos) {
      for (std::size_t i = 0; i < e.numel; ++i)
        EXPECT_EQ(p[i], e.name.ends_with("weight") ? 1.f : 0.f);
      continue;
    }
    const double fan_in = e.name.starts_with("layer1")   ? 25
                          : e.name.starts_with("layer2") ? 400
                                                         : 1568;
    const double bound = 1 / std::sqrt(fan_in);
    double mx = 0;
    for (std::size_t i = 0; i < e.numel; ++i) mx = std::max(mx, std::abs(double(p[i])));
    EXPECT_LE(mx, bound) << e.name;
    if (e.numel > 100) {
      EXPECT_GT(mx, 0.9 * bound) << e.name;  // fills the range
    }
  }
  b.init(10);
  EXPECT_FALSE(std::equal(a.params().begin(), a.params().end(), b.params().begin()));
}

// The whole network against PyTorch itself (tests/pytorch_oracle.py, float64): same weights,
// batch and mode must give the same loss, logits, every parameter gradient and the updated BN
// running statistics. Skips when that Python has no torch. The Python: $MNIST_DDP_PYTHON, else
// Debian's /usr/bin/python3 (python3-torch); started without LD_LIBRARY_PATH, which the GPU
// bundle's wrappers set for the project's binaries only.
std::string oracle_python() {
  const char* p = std::getenv("MNIST_DDP_PYTHON");
  return std::string("env -u LD_LIBRARY_PATH ") + (p != nullptr && *p ? p : "/usr/bin/python3");
}

// The oracle's answer for one input file's bytes, computed once: the reference and the oneDNN
// tests give it the same weights, batch and mode (each Python start costs ~2 s of importing torch).
// no_torch where that Python is missing or has no torch.
struct OracleAnswer {
  bool no_torch = false;
  std::vector<double> values;
};
OracleAnswer ask_pytorch(const std::string& input, std::size_t count) {
  static std::map<std::string, OracleAnswer> answers;
  if (auto it = answers.find(input); it != answers.end()) return it->second;
  const std::string in = ::testing::TempDir() + "oracle_in.bin";
  const std::string out = ::testing::TempDir() + "oracle_out.bin";
  std::ofstream(in, std::ios::binary).write(input.data(), std::streamsize(input.size()));
  const int status =
      std::system((oracle_python() + " tests/pytorch_oracle.py " + in + " " + out).c_str());
  OracleAnswer a;
  // 77: the oracle found no torch or numpy; 127: the shell found no such Python.
  if (WIFEXITED(status) && (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 127)) {
    a.no_torch = true;
  } else {
    EXPECT_EQ(status, 0) << "tests/pytorch_oracle.py failed";
    if (status != 0) return a;  // not remembered: the next test reports it again
    a.values.resize(count);
    std::ifstream f(out, std::ios::binary);
    f.read(reinterpret_cast<char*>(a.values.data()), std::streamsize(count * 8));
    if (f.gcount() != std::streamsize(count * 8)) {
      ADD_FAILURE() << out << ": " << f.gcount() << " bytes where the oracle writes " << count * 8;
      return {};  // not remembered either
    }
  }
  return answers.emplace(input, std::move(a)).first->second;
}

void check_against_pytorch(Mode mode, CpuKernels kernels) {
  auto ops = make_cpu_backend({.cpu_kernels = kernels});
  const int n = 6;
  ConvNet m(*ops, n);
  m.init(3);
  auto buf = m.buffers();
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = (i % 2 ? 1.5f : 0.05f) + 0.01f * (i % 7);
  SplitMix64 r(4);
  std::vector<float> x(n * 784);
  for (auto& v : x) v = r.uniform(-1, 2);
  const std::vector<std::int32_t> y = {1, 7, 3, 0, 9, 3};
  std::string input;
  const auto put = [&](const void* p, std::size_t bytes) {
    input.append(static_cast<const char*>(p), bytes);
  };
  const std::int32_t hdr[2] = {n, mode == Mode::Train ? 1 : 0};
  put(hdr, sizeof hdr);
  put(m.params().data(), m.params().size_bytes());
  put(m.buffers().data(), m.buffers().size_bytes());
  put(x.data(), x.size() * 4);
  put(y.data(), y.size() * 4);
  const OracleAnswer answer =
      ask_pytorch(input, 1 + n * 10 + m.params().size() + m.buffers().size());
  if (answer.no_torch) {
    GTEST_SKIP() << oracle_python()
                 << ": no such Python, or no torch in it (make deps installs python3-torch)";
  }
  ASSERT_FALSE(answer.values.empty());
  const std::vector<double>& ref = answer.values;

  // The bounds: the float32 error model of the step (test_util.hpp, compare.hpp) against the
  // float64 oracle, doubled for the training-mode BN backward, which subtracts two means of its
  // input gradient (dx = k (dy - mean dy - x^ mean(dy x^))) whose errors add. Logits: the forward's
  // gamma relative to the largest logit; the loss moves at most 2x the largest logit's error (its
  // gradient, softmax - onehot, sums to at most 2 in absolute value); running statistics: the
  // forward's gamma relative to max(1, the largest statistic).
  const double g_fwd = testing::float32_gamma(testing::step_float32_terms(n, true)),
               g_step = 2 * testing::float32_gamma(testing::step_float32_terms(n));
  std::vector<float> dl(n * 10);
  const float* logits = m.forward(x.data(), n, mode);
  const double loss = ops->softmax_cross_entropy(n, 10, logits, y.data(), dl.data(), 1.0 / n) / n;
  double largest_logit = 0;
  for (int i = 0; i < n * 10; ++i)
    largest_logit = testing::worst_of(largest_logit, std::abs(ref[1 + i]));
  const double logit_bound = g_fwd * largest_logit;
  EXPECT_NEAR(loss, ref[0], 2 * logit_bound);
  for (int i = 0; i < n * 10; ++i) EXPECT_NEAR(logits[i], ref[1 + i], logit_bound) << "logit " << i;
  std::vector<int> ready;
  m.backward(dl.data(), [&](int layer) { ready.push_back(layer); });
  EXPECT_EQ(ready, (std::vector<int>{2, 1, 0}));
  const double* g = ref.data() + 1 + n * 10;
  double worst = 0;
  for (const auto& e : m.param_entries()) {
    double scale = 1e-3;
    for (std::size_t k = 0; k < e.numel; ++k)
      scale = testing::worst_of(scale, std::abs(g[e.offset + k]));
    for (std::size_t k = 0; k < e.numel; ++k) {
      const double err = std::abs(m.grads()[e.offset + k] - g[e.offset + k]) / scale;
      worst = testing::worst_of(worst, err);
      EXPECT_LT(err, g_step) << e.name << "[" << k << "] ours " << m.grads()[e.offset + k]
                             << " torch " << g[e.offset + k];
    }
  }
  std::printf("max gradient error relative to each tensor's largest gradient: %.2e (bound %.2e)\n",
              worst, g_step);
  const double* rb = g + m.params().size();
  double largest_stat = 1;
  for (std::size_t i = 0; i < m.buffers().size(); ++i)
    largest_stat = testing::worst_of(largest_stat, std::abs(rb[i]));
  for (std::size_t i = 0; i < m.buffers().size(); ++i)
    EXPECT_NEAR(m.buffers()[i], rb[i], g_fwd * largest_stat) << i;
}

TEST(ConvNet, ReferenceMatchesPyTorchTrainBn) {
  check_against_pytorch(Mode::Train, CpuKernels::Reference);
}
TEST(ConvNet, ReferenceMatchesPyTorchFrozenBn) {
  check_against_pytorch(Mode::Frozen, CpuKernels::Reference);
}
TEST(ConvNet, OneDnnMatchesPyTorchTrainBn) {
  check_against_pytorch(Mode::Train, CpuKernels::OneDnn);
}
TEST(ConvNet, OneDnnMatchesPyTorchFrozenBn) {
  check_against_pytorch(Mode::Frozen, CpuKernels::OneDnn);
}

TEST(ConvNet, TrainForwardUpdatesRunningStatsEvalDoesNot) {
  auto ops = make_cpu_ops();
  ConvNet m(*ops, 2);
  m.init(1);
  std::vector<float> x(2 * 784, 0.5f);
  x[100] = 3.f;
  const std::vector<float> before(m.buffers().begin(), m.buffers().end());
  m.forward(x.data(), 2, Mode::Eval);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), m.buffers().begin()));
  EXPECT_EQ(m.num_batches_tracked()[0], 0);
  m.forward(x.data(), 2, Mode::Train);
  EXPECT_FALSE(std::equal(before.begin(), before.end(), m.buffers().begin()));
  // The caller counts training batches (once per step, however the step ran), not forward.
  EXPECT_EQ(m.num_batches_tracked()[0], 0);
  m.count_train_batch();
  EXPECT_EQ(m.num_batches_tracked()[0], 1);
  EXPECT_EQ(m.num_batches_tracked()[1], 1);
}

}  // namespace
}  // namespace mnist_ddp

namespace mnist_ddp {
namespace {

TEST(Buckets, ReverseLayerOrderUpToTheCap) {
  auto ops = make_cpu_ops();
  ConvNet m(*ops, 2);
  const auto fc = m.layer_range(2), l2 = m.layer_range(1), l1 = m.layer_range(0);
  // 25 KiB: every layer alone (fc 61 KiB and layer2 50 KiB exceed it by themselves).
  auto b = make_buckets(m, 25 * 1024);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].layers, std::vector<int>{2});
  EXPECT_EQ(b[0].offset, fc.first);
  EXPECT_EQ(b[1].layers, std::vector<int>{1});
  EXPECT_EQ(b[2].layers, std::vector<int>{0});
  EXPECT_EQ(b[2].offset, 0u);
  // 64 KiB: fc alone, then layer2 + layer1 together (53 KiB).
  b = make_buckets(m, 64 * 1024);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1].layers, (std::vector<int>{1, 0}));
  EXPECT_EQ(b[1].offset, 0u);
  EXPECT_EQ(b[1].count, l2.second + l1.second);
  // 1 MiB: one bucket, the whole arena.
  b = make_buckets(m, 1 << 20);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].count, m.params().size());
}

}  // namespace
}  // namespace mnist_ddp
