// half.cpp — IEEE half and bfloat16 conversions (round to nearest even, NaN/Inf preserved, fp16
// subnormals), one value at a time and (bf16) whole arrays.
#include "mnist_ddp/base/half.hpp"

#include <cstring>
#if defined(__x86_64__) && defined(__clang__) && __clang_major__ < 15
#include <immintrin.h>
#endif
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace mnist_ddp {

// Portable IEEE binary16 conversions (after F. Giesen's float_to_half_fast3_rtne and
// half_to_float): integer operations on the bits and one float addition for subnormals, which
// rounds to nearest even like the hardware paths below. Always compiled (the unit test checks the
// hardware path against it bit for bit); the conversion of every architecture without one.
std::uint16_t to_fp16_portable(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  std::uint32_t h = 0;
  if (u >= (127u + 16u) << 23) {  // |x| >= 65536, infinity or NaN: all exponent bits set
    h = u > 0x7f800000u ? 0x7e00u | ((u >> 13) & 0x3ffu) : 0x7c00u;  // NaN stays quiet NaN
  } else if (u < 113u << 23) {  // below 2^-14: a subnormal half or zero
    // Adding 0.5 (2^-1) leaves the half's 10-bit subnormal field in the low mantissa bits,
    // rounded to nearest even by the float addition itself.
    const std::uint32_t magic_bits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    float f, magic;
    std::memcpy(&f, &u, sizeof f);
    std::memcpy(&magic, &magic_bits, sizeof magic);
    f += magic;
    std::memcpy(&u, &f, sizeof u);
    h = u - magic_bits;
  } else {
    const std::uint32_t mant_odd = (u >> 13) & 1u;
    u += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + mant_odd;  // rebias, round
    h = u >> 13;  // a carry out of the mantissa rounds up to the next binade, or to infinity
  }
  return static_cast<std::uint16_t>(h | (sign >> 16));
}

float from_fp16_portable(std::uint16_t bits) {
  std::uint32_t u = static_cast<std::uint32_t>(bits & 0x7fffu) << 13;
  const std::uint32_t exp = u & (0x7c00u << 13);
  u += (127u - 15u) << 23;  // rebias
  float f;
  if (exp == 0x7c00u << 13) {
    u += (128u - 16u) << 23;  // infinity or NaN: the float's exponent all ones
    std::memcpy(&f, &u, sizeof f);
  } else if (exp == 0) {
    // Zero or subnormal: renormalised by one float subtraction (exact).
    const std::uint32_t magic_bits = 113u << 23;
    float magic;
    std::memcpy(&magic, &magic_bits, sizeof magic);
    u += 1u << 23;
    std::memcpy(&f, &u, sizeof f);
    f -= magic;
  } else {
    std::memcpy(&f, &u, sizeof f);
  }
  std::uint32_t out;
  std::memcpy(&out, &f, sizeof out);
  out |= static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  std::memcpy(&f, &out, sizeof f);
  return f;
}

#if defined(__x86_64__) && defined(__clang__) && __clang_major__ < 15
// Clang 14 (Debian 12's, which `make fuzz` builds with) has no _Float16 on x86-64; the F16C
// instructions convert the same way (round to nearest even, subnormals, NaN kept).
std::uint16_t to_fp16(float x) {
  return _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
}
float from_fp16(std::uint16_t bits) {
  return _cvtsh_ss(bits);
}
#elif defined(__x86_64__) || (defined(__aarch64__) && defined(__ARM_FP16_FORMAT_IEEE))
// The compiler's IEEE binary16 type: _Float16 on x86-64 (GCC 12, Clang 15: F16C where the build
// targets it), __fp16 on AArch64 (every compiler; GCC 12 has no _Float16 in C++ there: FCVT).
// Both convert with round-to-nearest-even (AArch64: the FPCR's default mode), subnormals too.
#if defined(__x86_64__)
using Binary16 = _Float16;
#else
using Binary16 = __fp16;
#endif
std::uint16_t to_fp16(float x) {
  const Binary16 h = static_cast<Binary16>(x);
  std::uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}
float from_fp16(std::uint16_t bits) {
  Binary16 h;
  std::memcpy(&h, &bits, sizeof bits);
  return static_cast<float>(h);
}
#else
std::uint16_t to_fp16(float x) {
  return to_fp16_portable(x);
}
float from_fp16(std::uint16_t bits) {
  return from_fp16_portable(bits);
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

void to_bf16(std::size_t n, const float* x, std::uint16_t* h) {
  std::size_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  // The CPU's own conversion, 16 at a time (what oneDNN's reorders run on such a CPU): the same
  // rounding, NaN quietened, except that it reads an fp32 subnormal as zero where to_bf16 rounds
  // it (to a bf16 subnormal or zero): the copies then match oneDNN's own conversions.
  for (; i + 16 <= n; i += 16) {
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    std::memcpy(h + i, &v, sizeof v);
  }
#endif
  for (; i < n; ++i) h[i] = to_bf16(x[i]);
}

}  // namespace mnist_ddp
