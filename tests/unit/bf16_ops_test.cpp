// bf16_ops_test.cpp — --amp bf16 on the oneDNN CPU backend (ops/cpu/dnnl_bf16): the bf16 rounding,
// and each convolution pass and the fc layer against the double-precision reference kernels run on
// bf16-rounded inputs, within fp32 accumulation's error bound (the semantics: bf16 copies in, fp32
// accumulation and output), and measurably away from the same reference on unrounded inputs (the
// copies are really bf16). The passes run through the backend, at one and at two compute threads,
// so whichever kernel this CPU's rule picks for a pass (oneDNN's bf16 primitive, ours for the
// image's passes at one thread on AVX512-BF16, or fp32 on rounded inputs) is the one tested; ours
// (conv1_bf16) also alone, over filter widths, paddings and odd sizes. Skipped where the CPU has
// no bf16 units (amp_test.cpp checks the refusal there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "mnist_ddp/base/half.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "ops/cpu/blocked_ops.hpp"
#include "ops/cpu/conv1_bf16.hpp"
#include "ops/cpu/cpu_kernels.hpp"
#include "ops/cpu/dnnl_bf16.hpp"

#include "test_util.hpp"

namespace mnist_ddp {
namespace {

using testing::bit_patterns;
using testing::uniform_floats;
using DVec = std::vector<double>;

float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(Bf16Round, ArraysRoundToNearestEvenAsTheHookCast) {
  const float in[] = {1.0f,
                      bits_float(0x3f808000u),
                      bits_float(0x3f818000u),
                      bits_float(0x3f80c000u),
                      -2.5f,
                      0.0f,
                      -0.0f,
                      std::numeric_limits<float>::infinity(),
                      3.4e38f};
  // 1 + 2^-8 is a tie: to even (1.0); 1 + 3 * 2^-8 is a tie: to even (up); 1 + 1.5 * 2^-8 rounds
  // up; the largest floats round to infinity, as float -> bf16 conversions do.
  const std::uint32_t want[] = {0x3f800000u, 0x3f800000u, 0x3f820000u, 0x3f810000u, 0xc0200000u,
                                0u,          0x80000000u, 0x7f800000u, 0x7f800000u};
  float out[std::size(in)];
  round_to_bf16(std::size(in), in, out);
  for (std::size_t i = 0; i < std::size(in); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &out[i], sizeof u);
    EXPECT_EQ(u, want[i]) << "input " << in[i];
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float nan_out;
  round_to_bf16(1, &nan, &nan_out);
  EXPECT_TRUE(std::isnan(nan_out));
  // The same values as the gradient hooks' cast (half.hpp) over many random floats.
  const auto x = uniform_floats(100000, 5, -1e3f, 1e3f);
  std::vector<float> y(x.size());
  round_to_bf16(x.size(), x.data(), y.data());
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], from_bf16(to_bf16(x[i]))) << x[i];
  // The array form of the cast (--amp bf16's activation copies; the CPU's own instruction where it
  // has one), on an odd length so both its vector and its scalar loop run.
  std::vector<std::uint16_t> h(x.size() - 3);
  to_bf16(h.size(), x.data(), h.data());
  for (std::size_t i = 0; i < h.size(); ++i) ASSERT_EQ(h[i], to_bf16(x[i])) << x[i];
  std::uint16_t special[std::size(in)];
  to_bf16(std::size(in), in, special);
  for (std::size_t i = 0; i < std::size(in); ++i) EXPECT_EQ(special[i], want[i] >> 16) << in[i];
}

DVec to_double(const std::vector<float>& v) {
  return DVec(v.begin(), v.end());
}
std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  round_to_bf16(v.size(), v.data(), r.data());
  return r;
}
DVec absolute(DVec v) {
  for (double& e : v) e = std::abs(e);
  return v;
}

// ours against the double-precision reference `ref` of the same sums over bf16-rounded inputs:
// every element within fp32 accumulation's worst-case bound gamma_K * sum|a||b| (sums = that
// reference over |a|, |b|; K terms per sum) plus the final rounding; and ours nearer `ref` than
// `unrounded` (the reference on the unrounded inputs) by at least 4x on average, so the inputs
// were really rounded to bf16 (their rounding moves a result by ~2^-9 relative per term).
void expect_bf16_sums(const char* what, const std::vector<float>& ours, const DVec& ref,
                      const DVec& sums, const DVec& unrounded, int k_terms) {
  ASSERT_EQ(ours.size(), ref.size());
  const double u = std::ldexp(1.0, -24), gamma = (k_terms + 1) * u / (1 - (k_terms + 1) * u);
  double worst = 0, near = 0, far = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const double err = std::abs(ours[i] - ref[i]), bound = gamma * sums[i] + u * std::abs(ref[i]);
    worst = std::max(worst, bound > 0 ? err / bound : (err > 0 ? 1e9 : 0));
    near += err;
    far += std::abs(ours[i] - unrounded[i]);
  }
  EXPECT_LE(worst, 1.0) << what << ": an element outside fp32 accumulation's bound (x" << worst
                        << ")";
  EXPECT_LT(4 * near, far) << what << ": mean error " << near / ours.size()
                           << " to the bf16-rounded reference, " << far / ours.size()
                           << " to the unrounded one";
}

// The kernel pick of a backend made at this many compute threads (dnnl_backend.cpp's rule).
bf16::Pick pick_at(int threads) {
  return threads == 1 ? bf16::Pick::OneThread : bf16::Pick::Threads;
}

class Bf16Ops : public ::testing::TestWithParam<std::tuple<ConvGeom, int>> {
 protected:
  void SetUp() override {
    if (bf16::cpu_units() == bf16::Units::None) GTEST_SKIP() << "no bf16 units on this CPU";
  }
};

TEST_P(Bf16Ops, ConvolutionPassesAreFp32SumsOfBf16Copies) {
  // Named copies, not a structured binding: clang 14 (the ASan tree) refuses to capture a binding
  // in a lambda.
  const ConvGeom g = std::get<0>(GetParam());
  const int threads = std::get<1>(GetParam());
  const testing::ComputeThreads scope(threads);
  auto ops = make_dnnl_ops(16);
  ops->set_amp(AmpMode::Bf16, nullptr, nullptr);
  const int ihw = g.h * g.w, ohw = g.out_h() * g.out_w();
  const auto x = uniform_floats(static_cast<std::size_t>(g.c) * g.n * ihw, 1);
  const auto w = uniform_floats(static_cast<std::size_t>(g.k) * g.c * g.r * g.r, 2);
  const auto b = uniform_floats(g.k, 3);
  const auto dy = uniform_floats(static_cast<std::size_t>(g.k) * g.n * ohw, 4);
  const auto xb = g.c == 1 ? x : [&] {
    std::vector<float> o(x.size());
    blocked::from_cnhw(16, g.c, g.n, ihw, x.data(), o.data());
    return o;
  }();
  std::vector<float> dyb(dy.size());
  blocked::from_cnhw(16, g.k, g.n, ohw, dy.data(), dyb.data());
  const auto unblock = [&](int c, int hw, const std::vector<float>& v) {
    std::vector<float> o(v.size());
    blocked::to_cnhw(16, c, g.n, hw, v.data(), o.data());
    return o;
  };
  // The double references: on rounded inputs, on |rounded inputs| (the bound's sums), unrounded.
  const DVec xr = to_double(rounded(x)), wr = to_double(rounded(w)), dyr = to_double(rounded(dy));
  const DVec xd = to_double(x), wd = to_double(w), dyd = to_double(dy), bd = to_double(b);
  DVec work(cpu::conv2d_workspace(g));

  std::vector<float> y(dy.size());
  ops->conv2d_forward(g, xb.data(), w.data(), b.data(), y.data());
  DVec ref(y.size()), sums(y.size()), unr(y.size());
  cpu::conv2d_forward(g, xr.data(), wr.data(), bd.data(), ref.data(), work.data());
  cpu::conv2d_forward(g, absolute(xr).data(), absolute(wr).data(), absolute(bd).data(), sums.data(),
                      work.data());
  cpu::conv2d_forward(g, xd.data(), wd.data(), bd.data(), unr.data(), work.data());
  expect_bf16_sums("forward", unblock(g.k, ohw, y), ref, sums, unr, g.c * g.r * g.r);

  std::vector<float> dw(w.size()), db(g.k);
  ops->conv2d_backward_filter(g, xb.data(), dyb.data(), dw.data(), db.data());
  DVec dwr(w.size()), dbr(g.k), dws(w.size()), dbs(g.k), dwu(w.size()), dbu(g.k);
  cpu::conv2d_backward_filter(g, xr.data(), dyr.data(), dwr.data(), dbr.data(), work.data());
  cpu::conv2d_backward_filter(g, absolute(xr).data(), absolute(dyr).data(), dws.data(), dbs.data(),
                              work.data());
  cpu::conv2d_backward_filter(g, xd.data(), dyd.data(), dwu.data(), dbu.data(), work.data());
  expect_bf16_sums("filter gradient", dw, dwr, dws, dwu, g.n * ohw);
  expect_bf16_sums("bias gradient", db, dbr, dbs, dbu, g.n * ohw);

  // Where the rule picks ours, the backend ran them: their bits.
  const bf16::Conv chosen(dnnl::engine(dnnl::engine::kind::cpu, 0), g, bf16::cpu_units(),
                          pick_at(threads));
  for (const bf16::Pass pass : {bf16::Pass::Forward, bf16::Pass::BackwardWeights}) {
    EXPECT_EQ(chosen.ours(pass), threads == 1 && bf16::runs_ours(g, pass, bf16::cpu_units()));
  }
  if (chosen.ours(bf16::Pass::Forward)) {
    std::vector<float> y_ours(y.size());
    bf16::image_forward(g, xb.data(), w.data(), b.data(), y_ours.data());
    EXPECT_EQ(bit_patterns(y), bit_patterns(y_ours));
  }
  if (chosen.ours(bf16::Pass::BackwardWeights)) {
    std::vector<std::uint16_t> dy16(dyb.size());
    to_bf16(dyb.size(), dyb.data(), dy16.data());
    std::vector<float> dw_ours(dw.size()), db_ours(db.size());
    bf16::image_filter_grad(g, xb.data(), dy16.data(), dw_ours.data(), db_ours.data());
    EXPECT_EQ(bit_patterns(dw), bit_patterns(dw_ours));
    EXPECT_EQ(bit_patterns(db), bit_patterns(db_ours));
  }

  if (g.c != 1) {
    std::vector<float> dx(x.size());
    ops->conv2d_backward_data(g, w.data(), dyb.data(), dx.data());
    DVec dxr(x.size()), dxs(x.size()), dxu(x.size());
    cpu::conv2d_backward_data(g, wr.data(), dyr.data(), dxr.data(), work.data());
    cpu::conv2d_backward_data(g, absolute(wr).data(), absolute(dyr).data(), dxs.data(),
                              work.data());
    cpu::conv2d_backward_data(g, wd.data(), dyd.data(), dxu.data(), work.data());
    expect_bf16_sums("data gradient", unblock(g.c, ihw, dx), dxr, dxs, dxu, g.k * g.r * g.r);
    // conv2d_backward (the model's one call) is bitwise the two passes above, and a second
    // evaluation is bitwise the first (resumes are bit-exact within bf16).
    std::vector<float> dw2(w.size()), db2(g.k), dx2(x.size());
    ops->conv2d_backward(g, xb.data(), w.data(), dyb.data(), dw2.data(), db2.data(), dx2.data());
    EXPECT_EQ(dw2, dw);
    EXPECT_EQ(db2, db);
    EXPECT_EQ(dx2, dx);
  }
  std::vector<float> y2(y.size());
  ops->conv2d_forward(g, xb.data(), w.data(), b.data(), y2.data());
  EXPECT_EQ(y2, y);
}
INSTANTIATE_TEST_SUITE_P(ModelShapes, Bf16Ops,
                         ::testing::Combine(::testing::Values(ConvGeom{7, 1, 28, 28, 16, 5, 2},
                                                              ConvGeom{7, 16, 14, 14, 32, 5, 2}),
                                            ::testing::Values(1, 2)));

// Ours for the image (conv1_bf16) called directly, over the filter widths they take (1..5), odd
// output widths (the last pixel of a row paired with a zero gradient), paddings wider than the
// filter, rows shorter than a tile, 32 channels (two blocks): each output within fp32
// accumulation's bound of the double reference on bf16-rounded inputs (a wrong tap, pair half,
// lane or border is off by a whole term), and nothing written past the outputs.
class Bf16ImageKernels : public ::testing::TestWithParam<ConvGeom> {
 protected:
  void SetUp() override {
    if (bf16::cpu_units() == bf16::Units::None) GTEST_SKIP() << "no bf16 units on this CPU";
    if (!bf16::image_kernels_fit(ConvGeom{1, 1, 28, 28, 16, 5, 2}))
      GTEST_SKIP() << "this build has no AVX512-BF16 kernels";
  }
};

TEST_P(Bf16ImageKernels, AreFp32SumsOfBf16Copies) {
  const ConvGeom g = GetParam();
  ASSERT_TRUE(bf16::image_kernels_fit(g));
  const int ihw = g.h * g.w, ohw = g.out_h() * g.out_w();
  const std::size_t out = static_cast<std::size_t>(g.k) * g.n * ohw,
                    wn = static_cast<std::size_t>(g.k) * g.r * g.r;
  const auto x = uniform_floats(static_cast<std::size_t>(g.n) * ihw, 41);
  const auto w = uniform_floats(wn, 42), b = uniform_floats(g.k, 43);
  const auto dy = uniform_floats(out, 44);
  const DVec xr = to_double(rounded(x)), wr = to_double(rounded(w)), dyr = to_double(rounded(dy));
  const DVec xd = to_double(x), wd = to_double(w), dyd = to_double(dy), bd = to_double(b);
  DVec work(cpu::conv2d_workspace(g));
  constexpr std::size_t kGuard = 64;  // elements past each output, which must stay -7
  const auto intact = [](const std::vector<float>& v, std::size_t n) {
    return std::all_of(v.begin() + n, v.end(), [](float f) { return f == -7.f; });
  };

  std::vector<float> yb(out + kGuard, -7.f), y(out);
  bf16::image_forward(g, x.data(), w.data(), b.data(), yb.data());
  EXPECT_TRUE(intact(yb, out)) << "forward wrote past its output";
  blocked::to_cnhw(16, g.k, g.n, ohw, yb.data(), y.data());
  DVec ref(out), sums(out), unr(out);
  cpu::conv2d_forward(g, xr.data(), wr.data(), bd.data(), ref.data(), work.data());
  cpu::conv2d_forward(g, absolute(xr).data(), absolute(wr).data(), absolute(bd).data(), sums.data(),
                      work.data());
  cpu::conv2d_forward(g, xd.data(), wd.data(), bd.data(), unr.data(), work.data());
  // The bias, then R x ceil(R / 2) pairs (an odd filter's last with a zero weight) per output:
  // at most R x (R + 1) terms.
  expect_bf16_sums("forward", y, ref, sums, unr, g.r * (g.r + 1));

  std::vector<float> dyb(out);
  blocked::from_cnhw(16, g.k, g.n, ohw, dy.data(), dyb.data());
  std::vector<std::uint16_t> dy16(out);
  to_bf16(out, dyb.data(), dy16.data());
  std::vector<float> dw(wn + kGuard, -7.f), db(g.k + kGuard, -7.f);
  bf16::image_filter_grad(g, x.data(), dy16.data(), dw.data(), db.data());
  EXPECT_TRUE(intact(dw, wn) && intact(db, g.k)) << "filter gradient wrote past dw or db";
  dw.resize(wn);
  db.resize(g.k);
  DVec dwr(wn), dbr(g.k), dws(wn), dbs(g.k), dwu(wn), dbu(g.k);
  cpu::conv2d_backward_filter(g, xr.data(), dyr.data(), dwr.data(), dbr.data(), work.data());
  cpu::conv2d_backward_filter(g, absolute(xr).data(), absolute(dyr).data(), dws.data(), dbs.data(),
                              work.data());
  cpu::conv2d_backward_filter(g, xd.data(), dyd.data(), dwu.data(), dbu.data(), work.data());
  // fp32 sums over one image's pixel pairs (an odd width's last pixel with a zero gradient).
  const int per_image = 2 * ((g.out_w() + 1) / 2) * g.out_h();
  expect_bf16_sums("filter gradient", dw, dwr, dws, dwu, per_image);
  expect_bf16_sums("bias gradient", db, dbr, dbs, dbu, per_image);
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, Bf16ImageKernels,
    ::testing::Values(ConvGeom{3, 1, 28, 28, 16, 5, 2},  // layer1: two full tiles a row
                      ConvGeom{2, 1, 9, 7, 32, 3, 1},    // two blocks, odd width
                      ConvGeom{2, 1, 6, 5, 16, 1, 0}, ConvGeom{2, 1, 8, 9, 16, 4, 0},
                      ConvGeom{2, 1, 7, 6, 16, 2, 1},
                      ConvGeom{1, 1, 22, 22, 16, 5, 2},  // a tile, then two of 4
                      ConvGeom{1, 1, 30, 31, 16, 5, 2},  // two tiles, then three single pixels
                      ConvGeom{2, 1, 4, 3, 16, 3, 1},    // rows < 5
                      ConvGeom{2, 1, 5, 4, 16, 3, 3},    // pad = R
                      ConvGeom{2, 1, 5, 4, 16, 2, 3}));  // pad > R

// The start-up line names ours where they run: layer1's two passes at one thread per rank on
// AVX512-BF16; never at two threads (oneDNN's multi-threaded kernels run there).
TEST(Bf16ImageKernels, TheStartUpLineNamesThemWhereTheyRun) {
  if (bf16::cpu_units() == bf16::Units::None) GTEST_SKIP() << "no bf16 units on this CPU";
  const auto line_at = [](int threads) {
    const testing::ComputeThreads scope(threads);
    return dnnl_layout(AmpMode::Bf16).bf16;
  };
  const std::string one = line_at(1), two = line_at(2);
  const bool ours_run =
      bf16::runs_ours(ConvGeom{64, 1, 28, 28, 16, 5, 2}, bf16::Pass::Forward, bf16::cpu_units());
  EXPECT_EQ(one.find("; mnist_ddp avx512_bf16: layer1 forward, layer1 filter gradient") !=
                std::string::npos,
            ours_run)
      << one;
  EXPECT_EQ(two.find("mnist_ddp"), std::string::npos) << two;
}

TEST(Bf16ImageKernels, TakeOnlyWhatTheyCanCompute) {
  EXPECT_FALSE(bf16::image_kernels_fit(ConvGeom{1, 2, 8, 8, 16, 3, 1}));   // two channels
  EXPECT_FALSE(bf16::image_kernels_fit(ConvGeom{1, 1, 8, 8, 24, 3, 1}));   // K % 16
  EXPECT_FALSE(bf16::image_kernels_fit(ConvGeom{1, 1, 8, 8, 16, 7, 3}));   // R > 5: oneDNN's
  EXPECT_FALSE(bf16::image_kernels_fit(ConvGeom{1, 1, 2, 2, 16, 5, 1}));   // past the padding
  EXPECT_FALSE(bf16::image_kernels_fit(ConvGeom{1, 1, 8, 8, 16, 3, -1}));  // negative padding
  std::vector<float> buf(4096);
  EXPECT_DEATH(bf16::image_forward(ConvGeom{1, 1, 8, 8, 24, 3, 1}, buf.data(), buf.data(),
                                   buf.data(), buf.data()),
               "geometry it does not take|not in this build");
  // Neither the portable builds (x86-64-v3, aarch64) nor AMX runs them: oneDNN's kernels do.
  const ConvGeom layer1{100, 1, 28, 28, 16, 5, 2};
  EXPECT_FALSE(bf16::runs_ours(layer1, bf16::Pass::Forward, bf16::Units::Amx));
  EXPECT_FALSE(bf16::runs_ours(layer1, bf16::Pass::Forward, bf16::Units::None));
  EXPECT_EQ(bf16::runs_ours(layer1, bf16::Pass::BackwardWeights, bf16::Units::Avx512Bf16),
            bf16::image_kernels_fit(layer1));
  EXPECT_FALSE(bf16::runs_ours(ConvGeom{100, 16, 14, 14, 32, 5, 2}, bf16::Pass::Forward,
                               bf16::Units::Avx512Bf16));
}

// One backend through batch sizes that change (an epoch's short last batch, evaluation's larger
// one) and back, on one and on two compute threads: each geometry's passes keep their own
// primitives, and a geometry met again gives the same bits as the first time.
TEST(Bf16Geometries, BatchSizesThatChangeAndThreadsKeepEachGeometryExact) {
  if (bf16::cpu_units() == bf16::Units::None) GTEST_SKIP() << "no bf16 units on this CPU";
  for (const int threads : {1, 2}) {
    const testing::ComputeThreads scope(threads);
    auto ops = make_dnnl_ops(16);
    ops->set_amp(AmpMode::Bf16, nullptr, nullptr);
    std::vector<std::vector<float>> first;
    for (const int n : {7, 3, 11, 7, 3}) {
      const ConvGeom g{n, 16, 14, 14, 32, 5, 2};
      const auto x = uniform_floats(static_cast<std::size_t>(n) * 16 * 196, 11);
      const auto w = uniform_floats(32 * 16 * 25, 12), b = uniform_floats(32, 13);
      const auto dy = uniform_floats(static_cast<std::size_t>(n) * 32 * 196, 14);
      std::vector<float> y(dy.size()), dw(w.size()), db(32), dx(x.size());
      ops->conv2d_forward(g, x.data(), w.data(), b.data(), y.data());
      ops->conv2d_backward(g, x.data(), w.data(), dy.data(), dw.data(), db.data(), dx.data());
      std::vector<float> all = y;
      for (const auto* v : {&dw, &db, &dx}) all.insert(all.end(), v->begin(), v->end());
      const bool seen = n == 7 ? first.size() > 0 : n == 3 ? first.size() > 1 : false;
      if (seen) {
        EXPECT_EQ(all, first[n == 7 ? 0 : 1]) << "batch " << n << ", " << threads << " thread(s)";
      } else if (n != 11) {
        first.push_back(all);
      }
      for (float v : all) ASSERT_TRUE(std::isfinite(v)) << "batch " << n;
    }
  }
}

// The bf16 copies the fused BN->ReLU->pool kernels make of their outputs for the convolution that
// reads them next (layer1's pooled output into layer2's forward and filter gradient, a BN
// backward's dx into the convolution's backward), and forward's copy of x reused by the filter
// gradient: the same bits as the convolutions converting the fp32 buffers themselves (here: the
// same values in other buffers, which no copy belongs to), and never a stale copy once the buffer
// has changed by another call or a new forward.
TEST(Bf16Copies, KernelMadeCopiesGiveTheBitsOfConversionsAndNeverGoStale) {
  if (bf16::cpu_units() == bf16::Units::None) GTEST_SKIP() << "no bf16 units on this CPU";
  const int n = 5, c = 16, h = 28, w = 28;
  const ConvGeom g{n, 16, 14, 14, 32, 5, 2};
  auto ops = make_dnnl_ops(16);
  ops->set_amp(AmpMode::Bf16, nullptr, nullptr);
  const auto conv_out = uniform_floats(static_cast<std::size_t>(n) * c * h * w, 21);
  const auto gamma = uniform_floats(c, 22), beta = uniform_floats(c, 23);
  std::vector<float> mean(c, 0.1f), invstd(c, 1.3f);
  const std::size_t pooled_n = static_cast<std::size_t>(n) * c * (h / 2) * (w / 2);
  std::vector<float> pooled(pooled_n);
  std::uint8_t* argmax = ops->alloc_bytes(pooled_n);
  const auto wt = uniform_floats(32 * 16 * 25, 24), b = uniform_floats(32, 25);
  const std::size_t out_n = static_cast<std::size_t>(n) * 32 * 196;
  const auto dy = uniform_floats(out_n, 26);
  const auto run = [&](const float* x, const float* dyv, std::vector<float>& y,
                       std::vector<float>& dw, std::vector<float>& db, std::vector<float>& dx) {
    y.assign(out_n, 0);
    dw.assign(wt.size(), 0);
    db.assign(32, 0);
    dx.assign(pooled_n, 0);
    ops->conv2d_forward(g, x, wt.data(), b.data(), y.data());
    ops->conv2d_backward(g, x, wt.data(), dyv, dw.data(), db.data(), dx.data());
  };
  // Layer1's pooled output, copied by the kernel, straight into layer2 (the model's order).
  ops->bn_relu_pool_forward(c, n, h, w, conv_out.data(), gamma.data(), beta.data(), mean.data(),
                            invstd.data(), pooled.data(), argmax);
  std::vector<float> y1, dw1, db1, dx1;
  run(pooled.data(), dy.data(), y1, dw1, db1, dx1);
  const std::vector<float> same_pooled = pooled, same_dy = dy;
  std::vector<float> y2, dw2, db2, dx2;
  run(same_pooled.data(), same_dy.data(), y2, dw2, db2, dx2);
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(dw1, dw2);
  EXPECT_EQ(db1, db2);
  EXPECT_EQ(dx1, dx2);

  // A BN backward's dx, copied by the kernel, into the convolution's backward (dy of layer2).
  std::vector<float> d_conv(out_n), dgamma(32), dbeta(32);
  const auto conv2_out = uniform_floats(out_n, 27), d_pool = uniform_floats(out_n / 4, 28);
  std::vector<float> pool2(out_n / 4), mean2(32, 0.05f), invstd2(32, 0.9f);
  std::uint8_t* argmax2 = ops->alloc_bytes(out_n / 4);
  const auto g2 = uniform_floats(32, 29), b2 = uniform_floats(32, 30);
  ops->bn_relu_pool_forward(32, n, 14, 14, conv2_out.data(), g2.data(), b2.data(), mean2.data(),
                            invstd2.data(), pool2.data(), argmax2);
  const auto bn_backward = [&] {
    ops->bn_relu_pool_backward(32, n, 14, 14, conv2_out.data(), pool2.data(), d_pool.data(),
                               argmax2, g2.data(), mean2.data(), invstd2.data(), true,
                               d_conv.data(), dgamma.data(), dbeta.data());
  };
  bn_backward();
  std::vector<float> dwa(wt.size()), dba(32), dxa(pooled_n);
  ops->conv2d_backward(g, same_pooled.data(), wt.data(), d_conv.data(), dwa.data(), dba.data(),
                       dxa.data());
  const std::vector<float> same_d_conv = d_conv;
  std::vector<float> dwb(wt.size()), dbb(32), dxb(pooled_n);
  ops->conv2d_backward(g, same_pooled.data(), wt.data(), same_d_conv.data(), dwb.data(), dbb.data(),
                       dxb.data());
  EXPECT_EQ(dwa, dwb);
  EXPECT_EQ(dba, dbb);
  EXPECT_EQ(dxa, dxb);

  // Stale copies: the kernel's copy of d_conv is dropped by any other call in between (here a
  // zero of another buffer) before the caller changes d_conv itself; forward's copy of x serves
  // one filter gradient only, so a changed x is converted afresh.
  bn_backward();
  std::vector<float> scratch(8);
  ops->zero(scratch.size(), scratch.data());
  for (float& v : d_conv) v *= -0.5f;
  const std::vector<float> changed = d_conv;
  ops->conv2d_backward(g, same_pooled.data(), wt.data(), d_conv.data(), dwa.data(), dba.data(),
                       dxa.data());
  ops->conv2d_backward(g, same_pooled.data(), wt.data(), changed.data(), dwb.data(), dbb.data(),
                       dxb.data());
  EXPECT_EQ(dwa, dwb) << "the filter gradient read a stale bf16 copy of dy";
  EXPECT_EQ(dxa, dxb) << "the data gradient read a stale bf16 copy of dy";
  std::vector<float> x = same_pooled, y(out_n);
  ops->conv2d_forward(g, x.data(), wt.data(), b.data(), y.data());
  ops->conv2d_backward_filter(g, x.data(), dy.data(), dwa.data(), dba.data());  // forward's copy
  for (float& v : x) v += 0.25f;
  const std::vector<float> moved = x;
  ops->conv2d_backward_filter(g, x.data(), dy.data(), dwa.data(), dba.data());
  ops->conv2d_backward_filter(g, moved.data(), dy.data(), dwb.data(), dbb.data());
  EXPECT_EQ(dwa, dwb) << "a second filter gradient read forward's bf16 copy of an x since changed";
  EXPECT_NE(dwa, dw1);
  ops->free_bytes(argmax);
  ops->free_bytes(argmax2);
}

// A block's backward in one call (the model's), against the two calls it stands for, on fresh
// backends at the model's batch, after the convolution's forward (whose bf16 x oneDNN's filter
// gradient reuses), at one and at two compute threads: the same bits in every gradient, fp32 and
// bf16, training and fixed BN statistics, at layer1's and layer2's shapes. Under --amp bf16, where
// every pass of the convolution reads dy's bf16 copy in place, the BN kernel stores only that copy
// and the scratch d_conv stays as it was (NaN: a pass reading it would make NaN gradients);
// elsewhere it holds the two calls' d_conv. On AVX512-BF16 (oneDNN's avx512_core_bf16 kernels on
// plain nChw16c bf16, and ours for layer1 at one thread) both layers take that path at both thread
// counts.
TEST(Bf16BlockBackward, OneCallGivesTheBitsOfBnBackwardThenConvBackward) {
  if (bf16::cpu_units() == bf16::Units::None) GTEST_SKIP() << "no bf16 units on this CPU";
  const int n = 100;
  int copy_only_cases = 0;
  // At one thread layer1's filter gradient is ours on AVX512-BF16, at two oneDNN's.
  for (const auto& step : {std::pair{1, ConvGeom{n, 1, 28, 28, 16, 5, 2}},
                           std::pair{1, ConvGeom{n, 16, 14, 14, 32, 5, 2}},
                           std::pair{2, ConvGeom{n, 1, 28, 28, 16, 5, 2}},
                           std::pair{2, ConvGeom{n, 16, 14, 14, 32, 5, 2}}}) {
    // Named copies, not a structured binding: clang 14 (the ASan tree) refuses to capture a
    // binding in the lambda below.
    const int threads = step.first;
    const ConvGeom g = step.second;
    const testing::ComputeThreads scope(threads);
    const int k = g.k, h = g.out_h(), w = g.out_w();
    const std::size_t out_n = static_cast<std::size_t>(n) * k * h * w,
                      in_n = static_cast<std::size_t>(n) * g.c * g.h * g.w;
    const auto x = uniform_floats(in_n, 31);
    const auto wt = uniform_floats(static_cast<std::size_t>(k) * g.c * 25, 32);
    const auto bias = uniform_floats(k, 37);
    const auto conv_out = uniform_floats(out_n, 33), d_pool = uniform_floats(out_n / 4, 34);
    const auto gamma = uniform_floats(k, 35), beta = uniform_floats(k, 36);
    const std::vector<float> mean(k, 0.05f), invstd(k, 1.1f);
    const bool copy_only =
        bf16::Conv(dnnl::engine(dnnl::engine::kind::cpu, 0), g, bf16::cpu_units(), pick_at(threads))
            .reads_dy16_only(g.c > 1);
    for (const bool use_bf16 : {false, true}) {
      for (const bool batch_stats : {true, false}) {
        SCOPED_TRACE(::testing::Message() << (use_bf16 ? "bf16" : "fp32") << ", " << g.c << " -> "
                                          << k << ", " << (batch_stats ? "batch" : "fixed")
                                          << " statistics, " << threads << " thread(s)");
        struct Out {
          std::vector<float> d_conv, dgamma, dbeta, dw, db, dx;
        };
        const auto run = [&](bool one_call) {
          auto ops = make_dnnl_ops(16);
          if (use_bf16) ops->set_amp(AmpMode::Bf16, nullptr, nullptr);
          std::vector<float> y(out_n), pooled(out_n / 4);
          ops->conv2d_forward(g, x.data(), wt.data(), bias.data(), y.data());
          std::uint8_t* argmax = ops->alloc_bytes(out_n / 4);
          ops->bn_relu_pool_forward(k, n, h, w, conv_out.data(), gamma.data(), beta.data(),
                                    mean.data(), invstd.data(), pooled.data(), argmax);
          Out o{.d_conv = std::vector<float>(out_n, std::numeric_limits<float>::quiet_NaN()),
                .dgamma = std::vector<float>(k),
                .dbeta = std::vector<float>(k),
                .dw = std::vector<float>(wt.size()),
                .db = std::vector<float>(k),
                .dx = std::vector<float>(g.c > 1 ? in_n : 0)};
          float* dx = g.c > 1 ? o.dx.data() : nullptr;
          const BnReluPoolGrad bn{.c = k,
                                  .n = n,
                                  .h = h,
                                  .w = w,
                                  .x = conv_out.data(),
                                  .y = pooled.data(),
                                  .dy = d_pool.data(),
                                  .argmax = argmax,
                                  .gamma = gamma.data(),
                                  .mean = mean.data(),
                                  .invstd = invstd.data(),
                                  .batch_stats = batch_stats,
                                  .dx = o.d_conv.data(),
                                  .dgamma = o.dgamma.data(),
                                  .dbeta = o.dbeta.data()};
          if (one_call) {
            ops->bn_relu_pool_conv_backward(bn, g, x.data(), wt.data(), o.dw.data(), o.db.data(),
                                            dx);
          } else {
            ops->bn_relu_pool_backward(k, n, h, w, bn.x, bn.y, bn.dy, bn.argmax, bn.gamma, bn.mean,
                                       bn.invstd, batch_stats, bn.dx, bn.dgamma, bn.dbeta);
            ops->conv2d_backward(g, x.data(), wt.data(), bn.dx, o.dw.data(), o.db.data(), dx);
          }
          ops->free_bytes(argmax);
          return o;
        };
        const Out two = run(false), one = run(true);
        EXPECT_EQ(bit_patterns(one.dgamma), bit_patterns(two.dgamma));
        EXPECT_EQ(bit_patterns(one.dbeta), bit_patterns(two.dbeta));
        EXPECT_EQ(bit_patterns(one.dw), bit_patterns(two.dw));
        EXPECT_EQ(bit_patterns(one.db), bit_patterns(two.db));
        EXPECT_EQ(bit_patterns(one.dx), bit_patterns(two.dx));
        for (float v : one.dw) ASSERT_TRUE(std::isfinite(v));
        for (float v : two.d_conv) ASSERT_FALSE(std::isnan(v));
        if (use_bf16 && copy_only) {
          ++copy_only_cases;
          EXPECT_TRUE(std::all_of(one.d_conv.begin(), one.d_conv.end(), [](float v) {
            return std::isnan(v);
          })) << "the scratch d_conv was written though its convolution reads the bf16 copy only";
        } else {
          EXPECT_EQ(bit_patterns(one.d_conv), bit_patterns(two.d_conv));
        }
      }
    }
  }
  if (bf16::cpu_units() == bf16::Units::Avx512Bf16) {
    EXPECT_EQ(copy_only_cases, 8) << "AVX512-BF16: both layers' backward should store bf16 only";
  }
}

TEST(Bf16Linear, FcGemmsAreFp32SumsOfBf16Copies) {
  if (bf16::cpu_units() == bf16::Units::None) GTEST_SKIP() << "no bf16 units on this CPU";
  const int n = 9, in = 1568, out = 10;
  auto ops = make_dnnl_ops(16);
  ops->set_amp(AmpMode::Bf16, nullptr, nullptr);
  const auto x = uniform_floats(static_cast<std::size_t>(n) * in, 6);
  const auto w = uniform_floats(static_cast<std::size_t>(out) * in, 7);
  const auto b = uniform_floats(out, 8);
  const auto dy = uniform_floats(static_cast<std::size_t>(n) * out, 9);
  std::vector<float> y(static_cast<std::size_t>(n) * out), dx(x.size()), dw(w.size()), db(out);
  ops->linear_forward(n, in, out, x.data(), w.data(), b.data(), y.data());
  ops->linear_backward(n, in, out, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
  const DVec xr = to_double(rounded(x)), wr = to_double(rounded(w)), dyr = to_double(rounded(dy));
  const DVec xd = to_double(x), wd = to_double(w), dyd = to_double(dy), bd = to_double(b);
  const auto fwd = [&](const DVec& xv, const DVec& wv, const DVec& bv) {
    DVec r(y.size());
    cpu::linear_forward(n, in, out, xv.data(), wv.data(), bv.data(), r.data());
    return r;
  };
  expect_bf16_sums("fc forward", y, fwd(xr, wr, bd), fwd(absolute(xr), absolute(wr), absolute(bd)),
                   fwd(xd, wd, bd), in);
  const auto bwd = [&](const DVec& xv, const DVec& wv, const DVec& dyv, DVec& dxv, DVec& dwv) {
    DVec dbv(out);
    dxv.assign(x.size(), 0);
    dwv.assign(w.size(), 0);
    cpu::linear_backward(n, in, out, xv.data(), wv.data(), dyv.data(), dxv.data(), dwv.data(),
                         dbv.data());
  };
  DVec dxr, dwr, dxs, dws, dxu, dwu;
  bwd(xr, wr, dyr, dxr, dwr);
  bwd(absolute(xr), absolute(wr), absolute(dyr), dxs, dws);
  bwd(xd, wd, dyd, dxu, dwu);
  expect_bf16_sums("fc data gradient", dx, dxr, dxs, dxu, out);
  expect_bf16_sums("fc weight gradient", dw, dwr, dws, dwu, n);
}

}  // namespace
}  // namespace mnist_ddp
