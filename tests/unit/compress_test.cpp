// compress_test.cpp — the 16-bit encodings behind the fp16/bf16 hooks: exact known encodings,
// round-to-nearest-even ties, special values, and the round-trip error bounds.
#include <gtest/gtest.h>

#include <cstring>

#include <cmath>
#include <limits>

#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/comm/compress.hpp"

namespace mnist_ddp {
namespace {

TEST(Fp16, KnownEncodingsAndSpecials) {
  EXPECT_EQ(to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(to_fp16(65504.0f), 0x7BFF);                          // largest finite
  EXPECT_EQ(to_fp16(65520.0f), 0x7C00);                          // rounds to +inf
  EXPECT_EQ(to_fp16(std::ldexp(1.0f, -24)), 0x0001);             // smallest subnormal
  EXPECT_EQ(to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even (down)
  EXPECT_EQ(to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(from_fp16(to_fp16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(from_fp16(0x3555), 0.333251953125f);
}

// The portable conversions against this machine's own (F16C/_Float16 on x86-64, FCVT on AArch64)
// bit for bit: every half value decoded; encoded, every half value, every midpoint between two
// neighbours (the ties) and the floats one ulp either side of it, and 2^20 random bit patterns
// (subnormals, infinities and NaNs among them; a NaN must stay a quiet NaN of the same sign).
TEST(Fp16, PortableConversionMatchesThisMachinesBitForBit) {
  const auto bits_of = [](float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
  };
  const auto same_encoding = [&](float x) {
    const std::uint16_t hw = to_fp16(x), sw = to_fp16_portable(x);
    if (std::isnan(x))
      return (hw & 0x7e00) == 0x7e00 && (sw & 0x7e00) == 0x7e00 && (hw & 0x8000) == (sw & 0x8000);
    return hw == sw;
  };
  int mismatches = 0;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto b = static_cast<std::uint16_t>(h);
    const float hw = from_fp16(b), sw = from_fp16_portable(b);
    if (std::isnan(hw) ? !std::isnan(sw) : bits_of(hw) != bits_of(sw)) ++mismatches;
    if (!same_encoding(hw)) ++mismatches;
    if ((b & 0x7c00) == 0x7c00 || b == 0x7bff || b == 0xfbff) continue;  // no finite neighbour
    const float mid = 0.5f * (hw + from_fp16(static_cast<std::uint16_t>(b + 1)));  // exact
    for (const float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)})
      if (!same_encoding(x)) ++mismatches;
  }
  SplitMix64 r(7);
  for (int i = 0; i < (1 << 20); ++i) {
    const auto u = static_cast<std::uint32_t>(r.next());
    float x;
    std::memcpy(&x, &u, sizeof x);
    if (!same_encoding(x)) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Bf16, KnownEncodingsAndSpecials) {
  EXPECT_EQ(to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(to_bf16(-1.0f), 0xBF80);
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even (down)
  EXPECT_EQ(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Compress, RoundTripErrorBounds) {
  SplitMix64 r(1);
  double worst16 = 0, worstb = 0;
  for (int i = 0; i < 100000; ++i) {
    const float x = r.uniform(-1, 1) * std::ldexp(1.0f, static_cast<int>(r.below(20)) - 10);
    if (std::abs(x) < 1e-4f) continue;  // fp16 subnormal range has absolute, not relative, error
    worst16 = std::max(worst16, std::abs(double(from_fp16(to_fp16(x))) - x) / std::abs(x));
    worstb = std::max(worstb, std::abs(double(from_bf16(to_bf16(x))) - x) / std::abs(x));
  }
  EXPECT_LE(worst16, std::ldexp(1.0, -11));  // half an ulp of an 11-bit significand
  EXPECT_LE(worstb, std::ldexp(1.0, -8));    // half an ulp of an 8-bit significand
  EXPECT_GT(worst16, std::ldexp(1.0, -13));  // and it really is 16-bit (not lossless)
}

}  // namespace
}  // namespace mnist_ddp
