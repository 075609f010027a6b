// mma_layout.hpp — which element of each matrix a lane holds in the TF32 tensor-core instruction
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (PTX ISA, "Matrix fragments for mma.m16n8k8",
// .tf32), and the index arithmetic of layer2's weight-gradient GEMM (wgrad_tf32.cu) that feeds it.
// Plain constexpr functions, so the host compiles them too: tests/unit/mma_layout_test.cpp checks
// the fragment maps against the PTX table and runs the kernel's tiling on the CPU against the
// reference convolution. Private to src/ops/cuda/ (and that test).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mnist_ddp::kernels {

// A lane is 4 * group + thread_in_group (group = lane / 4, 0..7; thread_in_group = lane % 4).
struct MmaCoord {
  int row = 0;
  int col = 0;
};
// A: 16 x 8 (M x K, row-major), four registers a0..a3 per lane.
constexpr MmaCoord mma_a_coord(int lane, int reg) {
  return {lane / 4 + 8 * (reg % 2), lane % 4 + 4 * (reg / 2)};
}
// B: 8 x 8 (K x N, "col": each lane holds one column), two registers b0, b1: row = k, col = n.
constexpr MmaCoord mma_b_coord(int lane, int reg) {
  return {lane % 4 + 4 * reg, lane / 4};
}
// C and D: 16 x 8 (M x N, row-major), four float registers c0..c3.
constexpr MmaCoord mma_c_coord(int lane, int reg) {
  return {lane / 4 + 8 * (reg / 2), 2 * (lane % 4) + reg % 2};
}

// cvt.rna.tf32.f32 on the host: round to the nearest value with a 10-bit mantissa, ties away from
// zero (the low 13 bits of the result are zero). Inf and NaN pass through.
inline float round_to_tf32(float v) {
  std::uint32_t u = 0;
  std::memcpy(&u, &v, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  float out = 0;
  std::memcpy(&out, &u, sizeof out);
  return out;
}

// The weight gradient as a GEMM: dW[K][C*R*R] = sum over images and output positions l of
// dY[K][l] * X[l][C*R*R], X the image's patches (im2col, never formed: read from the padded image
// in shared memory). Positions are padded to a multiple of 8 (the instruction's K) with zero dY.
struct WgradShape {
  int c = 0, k = 0, h = 0, w = 0, r = 0, pad = 0;
  constexpr int out_h() const { return h + 2 * pad - r + 1; }
  constexpr int out_w() const { return w + 2 * pad - r + 1; }
  constexpr int positions() const { return out_h() * out_w(); }
  constexpr int positions_padded() const { return (positions() + 7) / 8 * 8; }
  // dY's row stride in shared memory: 4 floats past the padded positions, so the 8 rows an A
  // fragment reads (stride = 12 mod 32 banks for layer2) fall in different banks.
  constexpr int dy_stride() const { return positions_padded() + 4; }
  constexpr int padded_h() const { return h + 2 * pad; }
  constexpr int padded_w() const { return w + 2 * pad; }
  constexpr int columns() const { return c * r * r; }  // GEMM N: one per filter tap
  constexpr int n_tiles() const { return (columns() + 7) / 8; }
  constexpr int m_tiles() const { return k / 16; }
};
// Column n's (channel, row, column) tap as an offset into the padded image [C][PH][PW]; -1 past
// the last column (a tile's tail: B is zero there).
constexpr int wgrad_tap_offset(const WgradShape& s, int n) {
  if (n >= s.columns()) return -1;
  const int ch = n / (s.r * s.r), tap = n % (s.r * s.r);
  return (ch * s.padded_h() + tap / s.r) * s.padded_w() + tap % s.r;
}
// Output position l's top-left corner in the padded image; -1 past the last position.
constexpr int wgrad_position_offset(const WgradShape& s, int l) {
  if (l >= s.positions()) return -1;
  return (l / s.out_w()) * s.padded_w() + l % s.out_w();
}

// The kernel's block: 8 warps; warp w owns row tile w % m_tiles and column tiles
// w / m_tiles + q * (8 / m_tiles), q < kWgradMaxTilesPerWarp (4 accumulators per tile and lane).
inline constexpr int kWgradWarps = 8;
inline constexpr int kWgradMaxTilesPerWarp = 16;
inline constexpr std::size_t kWgradSharedLimit = 48 * 1024;  // bytes without opting in
// Shared memory of one block: dY [K][dy_stride] and the padded image [C][PH][PW].
constexpr std::size_t wgrad_shared_floats(const WgradShape& s) {
  return static_cast<std::size_t>(s.k) * s.dy_stride() +
         static_cast<std::size_t>(s.c) * s.padded_h() * s.padded_w();
}
// Whether the kernel takes the shape (wgrad_tf32.cuh wgrad_tf32_supported).
constexpr bool wgrad_shape_supported(const WgradShape& s) {
  if (s.c < 1 || s.r < 1 || s.pad < 0 || s.out_h() < 1 || s.out_w() < 1) return false;
  if (s.k < 16 || s.k % 16 != 0 || kWgradWarps % s.m_tiles() != 0) return false;
  const int warps_per_row = kWgradWarps / s.m_tiles();
  if ((s.n_tiles() + warps_per_row - 1) / warps_per_row > kWgradMaxTilesPerWarp) return false;
  return sizeof(float) * wgrad_shared_floats(s) <= kWgradSharedLimit;
}
// The ConvNet's layer2 (16 -> 32 channels, 5x5, pad 2, on 14x14) is what the kernel is for.
static_assert(wgrad_shape_supported(WgradShape{16, 32, 14, 14, 5, 2}));

}  // namespace mnist_ddp::kernels
