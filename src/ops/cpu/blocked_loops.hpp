// blocked_loops.hpp — the four pixel loops of the fused BN->ReLU->maxpool kernels on
// channel-blocked activations [N][C/B][H][W][B] (B = 8 or 16, C a multiple of it; blocked_ops.cpp
// checks both and does the per-channel math around them), as a table per block, in two
// implementations with bit-for-bit the same results (tested): portable C++ (blocked_generic.cpp)
// and AVX2+FMA intrinsics (blocked_avx2.cpp, compiled where the build targets AVX2 and FMA:
// x86-64-v3, or -march=native on such a CPU). The same operations in the same order per lane;
// the intrinsics only arrange the work better (see blocked_avx2.cpp).
#pragma once

#include <cstdint>

#include "ops/cpu/avx2_build.hpp"

namespace mnist_ddp::blocked {

struct PixelLoops {
  // Per channel, over x[N][C/B][HW][B]: s += x and ss += x*x in double, pixels in order (image,
  // then pixel). s, ss: [C].
  void (*stats_sums)(int c, int n, int hw, const float* x, double* s, double* ss);
  // y = relu(max over each 2x2 window of x*scale + shift), argmax (0..3, row-major; the first
  // maximum wins). x: [N][C/B][H][W][B]; scale, shift: [C]; y, argmax: [N][C/B][H/2][W/2][B].
  // y16, where not nullptr: y's bf16 copy (to_bf16 of each value, stored with it), the same layout.
  void (*forward)(int c, int n, int h, int w, const float* x, const float* scale,
                  const float* shift, float* y, std::uint8_t* argmax, std::uint16_t* y16);
  // Per channel: s1 = sum of g, s2 = sum of g * (x[argmax] - mean), g = dy where y > 0, else 0;
  // float sums over one image's plane, folded into the double ones per image. mean, s1, s2: [C].
  void (*grad_sums)(int c, int n, int h, int w, const float* x, const float* y, const float* dy,
                    const std::uint8_t* argmax, const float* mean, double* s1, double* s2);
  // dx = c0 + (x - mean) * c1 at all four window positions, + kk*g at the argmax.
  // mean, kk, c0, c1: [C]; dx: [N][C/B][H][W][B]; dx16, where not nullptr: dx's bf16 copy.
  // dx may be nullptr where dx16 is not: then only the copy is stored (the same bits).
  void (*backward)(int c, int n, int h, int w, const float* x, const float* y, const float* dy,
                   const std::uint8_t* argmax, const float* mean, const float* kk, const float* c0,
                   const float* c1, float* dx, std::uint16_t* dx16);
};

// The loops at `block` (8 or 16): portable, and (defined only where kAvx2Build) AVX2.
const PixelLoops& generic_loops(int block);
const PixelLoops& avx2_loops(int block);

}  // namespace mnist_ddp::blocked
