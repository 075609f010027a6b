// half.cpp — IEEE half and bfloat16 conversions (round to nearest even, NaN/Inf preserved, fp16
// subnormals), one value at a time and (bf16) whole arrays.
#include "mnist_ddp/base/half.hpp"

#include <cstring>
#if defined(__clang__) && __clang_major__ < 15
#include <immintrin.h>
#endif

namespace mnist_ddp {

#if defined(__clang__) && __clang_major__ < 15
// Clang 14 (Debian 12's, which `make fuzz` builds with) has no _Float16 on x86-64; the F16C
// instructions convert the same way (round to nearest even, subnormals, NaN kept).
std::uint16_t to_fp16(float x) {
  return _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
}
float from_fp16(std::uint16_t bits) {
  return _cvtsh_ss(bits);
}
#else
std::uint16_t to_fp16(float x) {
  // _Float16 (GCC/Clang on x86-64) converts with round-to-nearest-even, including subnormals.
  const _Float16 h = static_cast<_Float16>(x);
  std::uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

float from_fp16(std::uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof bits);
  return static_cast<float>(h);
}
#endif

std::uint16_t to_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN
  // Round to nearest even on the 16 dropped bits.
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

void round_to_bf16(std::size_t n, const float* x, float* y) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, &x[i], sizeof u);
    // to_bf16's rounding, branch-free: NaN gets its quiet bit, the rest rounds to nearest even.
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    u = (nan ? (u | 0x00400000u) : u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&y[i], &u, sizeof u);
  }
}

}  // namespace mnist_ddp
