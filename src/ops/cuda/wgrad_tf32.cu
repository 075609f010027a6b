// wgrad_tf32.cu — layer2's weight gradient on TF32 tensor cores (wgrad_tf32.cuh).
#include "ops/cuda/wgrad_tf32.cuh"

#include <algorithm>
#include <cstdint>

#include "ops/cuda/kernels.cuh"  // kThreads, blocks_for
#include "ops/cuda/mma_layout.hpp"

namespace mnist_ddp::kernels {
namespace {

constexpr int kWarps = kWgradWarps;
constexpr int kMaxTilesPerWarp = kWgradMaxTilesPerWarp;
static_assert(kWarps * 32 == kThreads, "the kernel's warps fill a block of kThreads");
constexpr int kMaxSplit = 128;  // blocks over the batch

// TF32 needs sm_80 or later (the Makefile's CUDA_ARCH: sm_80, sm_90); built for an older GPU the
// kernel traps, so a run with --gpu-kernels own fails loudly there instead of computing nothing.
__device__ __forceinline__ std::uint32_t to_tf32(float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
  return 0;
#else
  std::uint32_t out;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(out) : "f"(v));
  return out;
#endif
}

// d += a * b on one warp: A 16x8, B 8x8, D 16x8 (mma_layout.hpp for which lane holds what).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const std::uint32_t (&a)[4],
                                         const std::uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// Grid: split blocks; block b takes images [n b / split, n (b + 1) / split). Warp w owns row tile
// w % m_tiles and column tiles w / m_tiles + q * (kWarps / m_tiles), q = 0, 1, ...
__global__ void __launch_bounds__(kThreads)
    wgrad_tf32_kernel(WgradShape s, int n, const float* x, const float* dy, float* partials) {
  extern __shared__ __align__(16) float shared[];
  const int positions = s.positions(), padded = s.positions_padded(), stride = s.dy_stride();
  float* ds = shared;                                           // [K][stride] dY, zero past P
  float* xs = shared + static_cast<std::size_t>(s.k) * stride;  // [C][PH][PW] TF32-rounded x
  const int image_floats = s.c * s.h * s.w, plane = s.padded_h() * s.padded_w();
  const int split = gridDim.x;
  const int lo = static_cast<int>(static_cast<long>(n) * blockIdx.x / split);
  const int hi = static_cast<int>(static_cast<long>(n) * (blockIdx.x + 1) / split);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int m_tiles = s.m_tiles(), n_tiles = s.n_tiles(), warps_per_row = kWarps / m_tiles;
  const int row0 = (warp % m_tiles) * 16;
  // This lane's B column in each of its tiles, as a tap offset into xs (-1: past the columns).
  int tap[kMaxTilesPerWarp];
#pragma unroll
  for (int q = 0; q < kMaxTilesPerWarp; ++q) {
    const int tile = warp / m_tiles + q * warps_per_row;
    tap[q] = tile < n_tiles ? wgrad_tap_offset(s, tile * 8 + mma_b_coord(lane, 0).col) : -1;
  }
  float acc[kMaxTilesPerWarp][4];
#pragma unroll
  for (int q = 0; q < kMaxTilesPerWarp; ++q)
#pragma unroll
    for (int v = 0; v < 4; ++v) acc[q][v] = 0.f;
  float bias = 0.f;  // threads < K: channel threadIdx.x's sum of dY, in position order
  for (int img = lo; img < hi; ++img) {
    // Sync: every warp is done with the previous image before it is overwritten.
    __syncthreads();
    const float* g = dy + static_cast<long>(img) * s.k * positions;
    for (int i = threadIdx.x; i < s.k * padded; i += blockDim.x) {
      const int ch = i / padded, l = i - ch * padded;
      ds[ch * stride + l] = l < positions ? g[ch * positions + l] : 0.f;
    }
    const float* xi = x + static_cast<long>(img) * image_floats;
    for (int i = threadIdx.x; i < s.c * plane; i += blockDim.x) {
      const int ch = i / plane, rest = i - ch * plane;
      const int y = rest / s.padded_w() - s.pad, xx = rest % s.padded_w() - s.pad;
      const bool inside = y >= 0 && y < s.h && xx >= 0 && xx < s.w;
      xs[i] = inside ? __uint_as_float(to_tf32(xi[(ch * s.h + y) * s.w + xx])) : 0.f;
    }
    // Sync: the image and its gradient are in shared memory before any warp reads them.
    __syncthreads();
    if (threadIdx.x < s.k) {
      const float* row = ds + threadIdx.x * stride;
      for (int l = 0; l < positions; ++l) bias += row[l];
    }
    for (int l0 = 0; l0 < padded; l0 += 8) {
      std::uint32_t a[4];
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const MmaCoord at = mma_a_coord(lane, v);
        a[v] = to_tf32(ds[(row0 + at.row) * stride + l0 + at.col]);
      }
      int pos[2];
#pragma unroll
      for (int v = 0; v < 2; ++v) pos[v] = wgrad_position_offset(s, l0 + mma_b_coord(lane, v).row);
#pragma unroll
      for (int q = 0; q < kMaxTilesPerWarp; ++q) {
        // The same for the whole warp (mma.sync needs every lane); an if, not a break, so the
        // unrolled loop indexes acc and tap by constants (registers, no local memory).
        if (warp / m_tiles + q * warps_per_row < n_tiles) {
          std::uint32_t b[2];
#pragma unroll
          for (int v = 0; v < 2; ++v)
            b[v] = tap[q] >= 0 && pos[v] >= 0 ? __float_as_uint(xs[tap[q] + pos[v]]) : 0u;
          mma_tf32(acc[q], a, b);
        }
      }
    }
  }
  // This block's partial sums: [K][C R R] then [K] (the bias).
  const int columns = s.columns();
  float* out = partials + static_cast<long>(blockIdx.x) * (s.k * columns + s.k);
#pragma unroll
  for (int q = 0; q < kMaxTilesPerWarp; ++q) {
    const int tile = warp / m_tiles + q * warps_per_row;
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const MmaCoord at = mma_c_coord(lane, v);
      const int col = tile * 8 + at.col;
      if (tile < n_tiles && col < columns) out[(row0 + at.row) * columns + col] = acc[q][v];
    }
  }
  if (threadIdx.x < s.k) out[s.k * columns + threadIdx.x] = bias;
}

// One thread per output (K * C R R weights, then K biases): the split's partials added in block
// order, in double.
__global__ void wgrad_tf32_finish_kernel(int outputs, int weights, int split, const float* partials,
                                         float* dw, float* db) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= outputs) return;
  double sum = 0;
  for (int v = 0; v < split; ++v) sum += partials[static_cast<long>(v) * outputs + t];
  if (t < weights)
    dw[t] = static_cast<float>(sum);
  else
    db[t - weights] = static_cast<float>(sum);
}

}  // namespace

bool wgrad_tf32_supported(int c, int k, int h, int w, int r, int pad) {
  return wgrad_shape_supported(WgradShape{c, k, h, w, r, pad});
}

int wgrad_tf32_split(int n) {
  return std::max(1, std::min(n, kMaxSplit));
}

std::size_t wgrad_tf32_partials(int n, int c, int k, int r) {
  return static_cast<std::size_t>(wgrad_tf32_split(n)) *
         (static_cast<std::size_t>(k) * c * r * r + k);
}

void launch_wgrad_tf32(cudaStream_t stream, int n, int c, int k, int h, int w, int r, int pad,
                       const float* x, const float* dy, float* partials, float* dw, float* db) {
  const WgradShape s{c, k, h, w, r, pad};
  const int split = wgrad_tf32_split(n);
  wgrad_tf32_kernel<<<split, kThreads, sizeof(float) * wgrad_shared_floats(s), stream>>>(
      s, n, x, dy, partials);
  const int weights = k * s.columns(), outputs = weights + k;
  wgrad_tf32_finish_kernel<<<blocks_for(static_cast<std::size_t>(outputs)), kThreads, 0, stream>>>(
      outputs, weights, split, partials, dw, db);
}

}  // namespace mnist_ddp::kernels
