// mma_layout_test.cpp — the host-side half of the TF32 weight-gradient kernel
// (src/ops/cuda/mma_layout.hpp, used by wgrad_tf32.cu), checked on any machine: the fragment maps
// of mma.m16n8k8 give every element of A, B and C/D to exactly one (lane, register) and match
// the PTX table's corners; cvt.rna.tf32's rounding; and the kernel's tiling (warps over row and
// column tiles, positions in steps of 8, patches read in place through the tap and position
// offsets) run on the CPU, one emulated mma per tile and step, against an exact convolution
// within the TF32 error model. The GPU run of the kernel itself is gpu_ops_test's
// OwnWeightGradientMatchesExactWithinTf32Model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "mnist_ddp/base/rng.hpp"
#include "ops/cuda/mma_layout.hpp"

namespace mnist_ddp::kernels {
namespace {

// Every (row, col) of a rows x cols matrix held by exactly one (lane, register).
template <typename Coord>
void expect_bijection(Coord coord, int regs, int rows, int cols, const char* what) {
  std::set<std::pair<int, int>> seen;
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < regs; ++r) {
      const MmaCoord c = coord(lane, r);
      ASSERT_GE(c.row, 0) << what;
      ASSERT_LT(c.row, rows) << what;
      ASSERT_GE(c.col, 0) << what;
      ASSERT_LT(c.col, cols) << what;
      EXPECT_TRUE(seen.insert({c.row, c.col}).second)
          << what << ": (" << c.row << ", " << c.col << ") held twice";
    }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(rows * cols)) << what;
}

TEST(MmaLayout, FragmentsCoverEachMatrixOnceAsThePtxTableSays) {
  expect_bijection(mma_a_coord, 4, 16, 8, "A");
  expect_bijection(mma_b_coord, 2, 8, 8, "B");
  expect_bijection(mma_c_coord, 4, 16, 8, "C");
  // The table's corners: lane 0 holds A's (0,0), (8,0), (0,4), (8,4); lane 31 A's (7,3) ...
  // (15,7); B: lane 0 (0,0) and (4,0), lane 31 (3,7) and (7,7); C: lane 0 (0,0), (0,1), (8,0),
  // (8,1), lane 31 (7,6), (7,7), (15,6), (15,7).
  const int a0[4][2] = {{0, 0}, {8, 0}, {0, 4}, {8, 4}},
            a31[4][2] = {{7, 3}, {15, 3}, {7, 7}, {15, 7}};
  const int c0[4][2] = {{0, 0}, {0, 1}, {8, 0}, {8, 1}},
            c31[4][2] = {{7, 6}, {7, 7}, {15, 6}, {15, 7}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(mma_a_coord(0, r).row, a0[r][0]);
    EXPECT_EQ(mma_a_coord(0, r).col, a0[r][1]);
    EXPECT_EQ(mma_a_coord(31, r).row, a31[r][0]);
    EXPECT_EQ(mma_a_coord(31, r).col, a31[r][1]);
    EXPECT_EQ(mma_c_coord(0, r).row, c0[r][0]);
    EXPECT_EQ(mma_c_coord(0, r).col, c0[r][1]);
    EXPECT_EQ(mma_c_coord(31, r).row, c31[r][0]);
    EXPECT_EQ(mma_c_coord(31, r).col, c31[r][1]);
  }
  EXPECT_EQ(mma_b_coord(0, 1).row, 4);
  EXPECT_EQ(mma_b_coord(31, 0).row, 3);
  EXPECT_EQ(mma_b_coord(31, 1).row, 7);
  EXPECT_EQ(mma_b_coord(31, 1).col, 7);
}

TEST(MmaLayout, Tf32RoundsToNearestTiesAwayFromZero) {
  const float one = 1.f, ulp = std::ldexp(1.f, -10);  // TF32's spacing at 1
  EXPECT_EQ(round_to_tf32(one), one);
  EXPECT_EQ(round_to_tf32(one + ulp / 2), one + ulp);  // a tie: away from zero
  EXPECT_EQ(round_to_tf32(-(one + ulp / 2)), -(one + ulp));
  EXPECT_EQ(round_to_tf32(one + ulp / 4), one);
  EXPECT_EQ(round_to_tf32(one + 3 * ulp / 4), one + ulp);
  EXPECT_TRUE(std::isinf(round_to_tf32(INFINITY)));
  EXPECT_TRUE(std::isnan(round_to_tf32(NAN)));
  SplitMix64 rng(5);
  for (int i = 0; i < 10000; ++i) {
    const float v = rng.uniform(-100, 100), t = round_to_tf32(v);
    std::uint32_t bits = 0;
    std::memcpy(&bits, &t, sizeof bits);
    EXPECT_EQ(bits & 0x1fffu, 0u) << v;
    EXPECT_LE(std::abs(double(t) - v), std::ldexp(std::abs(double(v)), -11)) << v;
  }
}

// The kernel's loops (wgrad_tf32.cu) for one block holding every image: the fragments each lane
// loads, assembled into the matrices the instruction multiplies, and their product added in FP32
// (the tensor cores' own rounding, the batch split, the bias and the finish kernel are not
// emulated: the GPU test covers them).
std::vector<double> emulate_kernel(const WgradShape& s, int n, const std::vector<float>& x,
                                   const std::vector<float>& dy) {
  constexpr int kWarps = 8;
  const int positions = s.positions(), padded = s.positions_padded();
  const int plane = s.padded_h() * s.padded_w();
  const int warps_per_row = kWarps / s.m_tiles(), columns = s.columns();
  std::vector<float> acc(static_cast<std::size_t>(kWarps) * 32 * 16 * 4, 0.f);
  const int stride = s.dy_stride();
  std::vector<float> ds(static_cast<std::size_t>(s.k) * stride), xs(s.c * plane);
  for (int img = 0; img < n; ++img) {
    for (int i = 0; i < s.k * padded; ++i) {
      const int ch = i / padded, l = i % padded;
      ds[ch * stride + l] =
          l < positions ? dy[(static_cast<std::size_t>(img) * s.k + ch) * positions + l] : 0.f;
    }
    for (int i = 0; i < s.c * plane; ++i) {
      const int ch = i / plane, y = i % plane / s.padded_w() - s.pad, xx = i % s.padded_w() - s.pad;
      const bool inside = y >= 0 && y < s.h && xx >= 0 && xx < s.w;
      xs[i] =
          inside
              ? round_to_tf32(x[((static_cast<std::size_t>(img) * s.c + ch) * s.h + y) * s.w + xx])
              : 0.f;
    }
    for (int warp = 0; warp < kWarps; ++warp) {
      const int row0 = (warp % s.m_tiles()) * 16;
      for (int q = 0; q < 16; ++q) {
        const int tile = warp / s.m_tiles() + q * warps_per_row;
        if (tile >= s.n_tiles()) break;
        for (int l0 = 0; l0 < padded; l0 += 8) {
          float a[16][8] = {}, b[8][8] = {};
          for (int lane = 0; lane < 32; ++lane) {
            for (int v = 0; v < 4; ++v) {
              const MmaCoord at = mma_a_coord(lane, v);
              a[at.row][at.col] = round_to_tf32(ds[(row0 + at.row) * stride + l0 + at.col]);
            }
            const int tap = wgrad_tap_offset(s, tile * 8 + mma_b_coord(lane, 0).col);
            for (int v = 0; v < 2; ++v) {
              const MmaCoord at = mma_b_coord(lane, v);
              const int pos = wgrad_position_offset(s, l0 + at.row);
              b[at.row][at.col] = tap >= 0 && pos >= 0 ? xs[tap + pos] : 0.f;
            }
          }
          for (int lane = 0; lane < 32; ++lane)
            for (int v = 0; v < 4; ++v) {
              const MmaCoord at = mma_c_coord(lane, v);
              float& d = acc[((static_cast<std::size_t>(warp) * 32 + lane) * 16 + q) * 4 + v];
              for (int kk = 0; kk < 8; ++kk) d += a[at.row][kk] * b[kk][at.col];
            }
        }
      }
    }
  }
  std::vector<double> dw(static_cast<std::size_t>(s.k) * columns, -1e300);
  for (int warp = 0; warp < kWarps; ++warp)
    for (int q = 0; q < 16; ++q) {
      const int tile = warp / s.m_tiles() + q * warps_per_row;
      if (tile >= s.n_tiles()) break;
      for (int lane = 0; lane < 32; ++lane)
        for (int v = 0; v < 4; ++v) {
          const MmaCoord at = mma_c_coord(lane, v);
          const int col = tile * 8 + at.col;
          if (col < columns)
            dw[((warp % s.m_tiles()) * 16 + at.row) * columns + col] =
                acc[((static_cast<std::size_t>(warp) * 32 + lane) * 16 + q) * 4 + v];
        }
    }
  return dw;
}

TEST(MmaLayout, TheKernelTakesLayer2AndRefusesWhatItCannotHold) {
  EXPECT_TRUE(wgrad_shape_supported(WgradShape{16, 32, 14, 14, 5, 2}));  // the ConvNet's layer2
  EXPECT_EQ(sizeof(float) * wgrad_shared_floats(WgradShape{16, 32, 14, 14, 5, 2}), 46848u);
  EXPECT_TRUE(wgrad_shape_supported(WgradShape{3, 16, 9, 11, 3, 1}));
  EXPECT_FALSE(wgrad_shape_supported(WgradShape{16, 24, 14, 14, 5, 2}));  // K not 16-aligned
  EXPECT_FALSE(wgrad_shape_supported(WgradShape{64, 32, 14, 14, 5, 2}));  // 200 column tiles
  EXPECT_FALSE(wgrad_shape_supported(WgradShape{16, 32, 28, 28, 5, 2}));  // over 48 KiB
  EXPECT_FALSE(wgrad_shape_supported(WgradShape{16, 32, 2, 2, 5, 0}));    // no output
}

TEST(MmaLayout, TheKernelsTilingComputesTheWeightGradient) {
  // layer2's shape at batch 2, and one with a ragged last column tile and odd positions.
  for (const auto& [s, n] : {std::pair{WgradShape{16, 32, 14, 14, 5, 2}, 2},
                             std::pair{WgradShape{3, 16, 7, 9, 3, 1}, 3}}) {
    SplitMix64 rng(7);
    std::vector<float> x(static_cast<std::size_t>(n) * s.c * s.h * s.w);
    std::vector<float> dy(static_cast<std::size_t>(n) * s.k * s.positions());
    for (auto& v : x) v = rng.uniform(-1, 1);
    for (auto& v : dy) v = rng.uniform(-1, 1);
    const std::vector<double> got = emulate_kernel(s, n, x, dy);
    const double u = std::ldexp(1.0, -24), terms = static_cast<double>(n) * s.positions();
    const double model = std::ldexp(1.0, -10) + std::ldexp(1.0, -22) + terms * u / (1 - terms * u);
    for (int k = 0; k < s.k; ++k)
      for (int col = 0; col < s.columns(); ++col) {
        const int ch = col / (s.r * s.r), r = col % (s.r * s.r) / s.r, t = col % s.r;
        double exact = 0, mag = 0;
        for (int i = 0; i < n; ++i)
          for (int l = 0; l < s.positions(); ++l) {
            const int iy = l / s.out_w() + r - s.pad, ix = l % s.out_w() + t - s.pad;
            if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
            const double p =
                double(dy[(static_cast<std::size_t>(i) * s.k + k) * s.positions() + l]) *
                x[((static_cast<std::size_t>(i) * s.c + ch) * s.h + iy) * s.w + ix];
            exact += p;
            mag += std::abs(p);
          }
        const double g = got[static_cast<std::size_t>(k) * s.columns() + col];
        ASSERT_LE(std::abs(g - exact), model * mag)
            << "k " << k << " column " << col << ": " << g << " vs " << exact;
      }
  }
}

}  // namespace
}  // namespace mnist_ddp::kernels
