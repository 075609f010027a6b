// compress.hpp — gradient compression hooks (PyTorch's DDP communication hooks): the names of
// --compression and 16-bit encodings of host buffers (model/half.hpp has the conversions).
// fp16/bf16: divide by the world size first (as PyTorch), encode, all-reduce the 16-bit values
// with a 16-bit sum, decode.
#pragma once

#include <cstdint>
#include <span>
#include "mnist_ddp/model/half.hpp"
#include "mnist_ddp/runtime/enum_names.hpp"

namespace mnist_ddp {

// PowerSgd* are PowerSGD hooks (powersgd.hpp); the others are the 16-bit casts.
enum class Compression { None, Fp16, Bf16, PowerSgd, PowerSgdFp16, BatchedPowerSgdFp16 };
inline constexpr std::array<NameOf<Compression>, 6> kCompressionNames{
    {{Compression::None, "none"},
     {Compression::Fp16, "fp16"},
     {Compression::Bf16, "bf16"},
     {Compression::PowerSgd, "powersgd"},
     {Compression::PowerSgdFp16, "powersgd_fp16"},
     {Compression::BatchedPowerSgdFp16, "batched_powersgd_fp16"}}};
bool is_powersgd(Compression c);

// Encode/decode a whole buffer (out.size() == in.size()).
void encode16(std::span<const float> in, std::span<std::uint16_t> out, Compression c);
void decode16(std::span<const std::uint16_t> in, std::span<float> out, Compression c);

const char* to_string(Compression c);

}  // namespace mnist_ddp
