// half.hpp — IEEE half (fp16) and bfloat16 conversions of float32 on the host: round to nearest
// even, NaN/Inf preserved, fp16 subnormals. The gradient hooks' casts (Ops::encode_half on the
// CPU backends), the MPI 16-bit sums and PowerSGD's fp16 wire format use them; --amp bf16 on the
// CPU rounds whole arrays (round_to_bf16).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mnist_ddp {

// This machine's conversions: the CPU's own instructions where the compiler reaches them
// (_Float16 / F16C on x86-64, __fp16 on AArch64), else the portable ones below.
std::uint16_t to_fp16(float x);
float from_fp16(std::uint16_t h);
// The portable conversions (integer operations and one float addition): the fallback of every
// other architecture, and the reference the hardware paths are tested against bit for bit.
std::uint16_t to_fp16_portable(float x);
float from_fp16_portable(std::uint16_t h);
std::uint16_t to_bf16(float x);
float from_bf16(std::uint16_t h);
// y[i] = from_bf16(to_bf16(x[i])): x rounded to bf16, kept as float (a loop the compiler
// vectorises); y may be x.
void round_to_bf16(std::size_t n, const float* x, float* y);
// h[i] = to_bf16(x[i]) (a loop the compiler vectorises): --amp bf16's copies of activations.
void to_bf16(std::size_t n, const float* x, std::uint16_t* h);

}  // namespace mnist_ddp
