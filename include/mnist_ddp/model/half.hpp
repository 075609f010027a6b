// half.hpp — IEEE half (fp16) and bfloat16 conversions of float32 on the host: round to nearest
// even, NaN/Inf preserved, fp16 subnormals. The gradient hooks' casts (Ops::encode_half on the
// CPU backends), the MPI 16-bit sums and PowerSGD's fp16 wire format use them.
#pragma once

#include <cstdint>

namespace mnist_ddp {

std::uint16_t to_fp16(float x);
float from_fp16(std::uint16_t h);
std::uint16_t to_bf16(float x);
float from_bf16(std::uint16_t h);

}  // namespace mnist_ddp
