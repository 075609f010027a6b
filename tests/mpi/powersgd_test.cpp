// powersgd_test.cpp — the PowerSGD hooks under mpirun, each against a reference the test computes:
// full rank reproduces the exact average (per-tensor, fp16, batched), error feedback keeps what
// compression lost, and the byte cut on this model.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "../common/compare.hpp"
#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/comm/powersgd.hpp"
#include "mnist_ddp/comm/reducer.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"

namespace mnist_ddp {
namespace {

// Host-memory collectives over MPI_COMM_WORLD, one per test (owned, torn down before MPI).
class PowerSgdTest : public ::testing::Test {
 protected:
  std::unique_ptr<Comm> comm_ = make_mpi_comm();
  Comm& comm() { return *comm_; }
};

// Rank r's bucket: a 6x9 matrix then a 4-element vector, values drawn from seed 100 + r.
std::vector<float> bucket_of(int r) {
  SplitMix64 g(100 + static_cast<std::uint64_t>(r));
  std::vector<float> v(6 * 9 + 4);
  for (float& x : v) x = g.uniform(-1.f, 1.f);
  return v;
}
std::vector<float> average_bucket(int n) {
  std::vector<float> avg(6 * 9 + 4, 0.f);
  for (int r = 0; r < n; ++r) {
    const auto b = bucket_of(r);
    for (std::size_t i = 0; i < avg.size(); ++i) avg[i] += b[i];
  }
  for (float& x : avg) x /= static_cast<float>(n);
  return avg;
}
const std::vector<std::vector<BucketTensor>> kTensors = {{{0, 6, 9}, {54, 0, 4}}};

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = testing::worst_of(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

TEST_F(PowerSgdTest, OrthogonalizeGivesOrthonormalColumns) {
  SplitMix64 g(7);
  std::vector<float> m(40 * 3);
  for (float& x : m) x = g.uniform(-1.f, 1.f);
  orthogonalize(m.data(), 40, 3);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double dot = 0;
      for (int r = 0; r < 40; ++r) dot += double(m[r * 3 + i]) * m[r * 3 + j];
      EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5) << i << "," << j;
    }
  std::vector<float> zero(5 * 2, 0.f);
  orthogonalize(zero.data(), 5, 2);  // a zero column stays zero (no NaN)
  for (float x : zero) EXPECT_EQ(x, 0.f);
}

TEST_F(PowerSgdTest, CompressionRuleAndSquareSide) {
  // PyTorch's rule: rows*cols >= (rows+cols)*r*rate.
  EXPECT_TRUE(should_compress(32, 400, 2, 2.0));   // 12800 >= 1728
  EXPECT_TRUE(should_compress(10, 1568, 2, 2.0));  // 15680 >= 6312
  EXPECT_FALSE(should_compress(4, 4, 2, 2.0));     // 16 < 32
  EXPECT_FALSE(should_compress(16, 25, 2, 6.0));   // 400 < 492
  EXPECT_EQ(square_side(1), 1u);
  EXPECT_EQ(square_side(4), 2u);
  EXPECT_EQ(square_side(5), 3u);
  EXPECT_EQ(square_side(15690), 126u);  // fc bucket: 125^2 = 15625 < 15690 <= 126^2
}

TEST_F(PowerSgdTest, FullRankReproducesTheExactAverage) {
  // rank = rows: P spans the whole column space, so P P^T avg(M) = avg(M).
  PowerSgd p(comm(), PowerSgdConfig{6, 0, 0.0, false, false, 1}, kTensors, {58});
  auto g = bucket_of(comm().rank());
  p.reduce(0, g);
  p.next_iter();
  const double err = max_abs_diff(g, average_bucket(comm().size()));
  EXPECT_LT(err, 2e-5) << "max abs error " << err;
}

TEST_F(PowerSgdTest, Fp16FullRankIsTheAverageToFp16Precision) {
  PowerSgd p(comm(), PowerSgdConfig{6, 0, 0.0, false, true, 1}, kTensors, {58});
  auto g = bucket_of(comm().rank());
  p.reduce(0, g);
  const double err = max_abs_diff(g, average_bucket(comm().size()));
  EXPECT_LT(err, 5e-3) << "max abs error " << err;
  EXPECT_EQ(p.last_payload_bytes(), (6 * 6 + 9 * 6 + 4) * 2u);  // P, Q and the vector in fp16
}

TEST_F(PowerSgdTest, BatchedPacksTheBucketIntoAPaddedSquare) {
  // 58 elements -> an 8x8 matrix with 6 zeros; full rank (8) gives the exact average (to float32
  // Gram-Schmidt over 8 columns), and
  // Q and the error buffer have the square's sizes.
  PowerSgd p(comm(), PowerSgdConfig{8, 0, 0.0, true, false, 1}, kTensors, {58});
  auto g = bucket_of(comm().rank());
  p.reduce(0, g);
  const double err = max_abs_diff(g, average_bucket(comm().size()));
  EXPECT_LT(err, 1e-4) << "max abs error " << err;
  const auto st = p.state();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].first, "powersgd_error_0");
  EXPECT_EQ(st[0].second.size(), 64u);
  EXPECT_EQ(st[1].first, "powersgd_q_0");
  EXPECT_EQ(st[1].second.size(), 8u * 8u);
  EXPECT_EQ(p.last_payload_bytes(), 2u * 8 * 8 * 4);  // P and Q, float32
}

TEST_F(PowerSgdTest, ErrorFeedbackKeepsWhatCompressionLost) {
  // Rank 1 loses information. Per rank: input = grad + previous error, and the new error is
  // input - output, so over steps sum(outputs) + final error == sum(grads) exactly (to rounding).
  PowerSgd p(comm(), PowerSgdConfig{1, 0, 0.0, false, false, 3}, kTensors, {58});
  std::vector<double> sum_in(58, 0.0), sum_out(58, 0.0);
  for (int step = 0; step < 4; ++step) {
    auto g = bucket_of(comm().rank() + 10 * step);
    for (std::size_t i = 0; i < g.size(); ++i) sum_in[i] += g[i];
    auto before = p.state();
    p.reduce(0, g);
    p.next_iter();
    for (std::size_t i = 0; i < g.size(); ++i) sum_out[i] += g[i];
    if (step == 0) {
      // The first step: the error is exactly grad - output.
      const auto err = p.state()[0].second;
      const auto in = bucket_of(comm().rank());
      for (std::size_t i = 0; i < 54; ++i) EXPECT_NEAR(err[i], in[i] - g[i], 1e-6);
    }
  }
  const auto err = p.state()[0].second;
  double worst = 0, lost = 0;
  for (std::size_t i = 0; i < 54; ++i) {
    worst = testing::worst_of(worst, std::fabs(sum_out[i] + err[i] - sum_in[i]));
    lost = testing::worst_of(lost, std::fabs(double(err[i])));
  }
  EXPECT_LT(worst, 1e-4) << "outputs + error differ from the inputs by " << worst;
  EXPECT_GT(lost, 1e-3) << "rank 1 should lose something on a 6x9 matrix";
  EXPECT_EQ(p.iter(), 4);
}

TEST_F(PowerSgdTest, CutsThisModelsBytesMoreThanFivefold) {
  auto ops = make_cpu_backend();
  ConvNet model(*ops, 2);
  model.init(1);
  std::uint64_t bytes[2] = {0, 0};
  const Compression modes[2] = {Compression::None, Compression::PowerSgd};
  for (int m = 0; m < 2; ++m) {
    Reducer red(comm(), model, 25 * 1024, false, modes[m], PowerSgdConfig{2, 0, 2.0});
    for (float& g : model.grads()) g = 0.5f;
    red.finish();
    red.count_step();
    bytes[m] = red.take_stats().payload_bytes;
  }
  EXPECT_EQ(bytes[0], model.grads().size_bytes());
  // fc (10+1568)*2, layer2 conv (32+400)*2, layer1 conv (16+25)*2, 154 uncompressed: 4256 floats.
  EXPECT_EQ(bytes[1], 4256u * 4u);
  EXPECT_GT(double(bytes[0]) / double(bytes[1]), 5.0);
}

}  // namespace
}  // namespace mnist_ddp
