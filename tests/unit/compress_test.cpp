// compress_test.cpp — the 16-bit encodings behind the fp16/bf16 hooks: exact known encodings,
// round-to-nearest-even ties, special values, and the round-trip error bounds.
#include <gtest/gtest.h>

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
