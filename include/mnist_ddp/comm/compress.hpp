// compress.hpp — gradient compression hooks (PyTorch's DDP communication hooks): the names of
// --compression and 16-bit encodings of host buffers (base/half.hpp has the conversions).
// fp16/bf16: divide by the world size first (as PyTorch), encode, all-reduce the 16-bit values
// with a 16-bit sum, decode.
#pragma once

#include <cstdint>
#include <span>
#include "mnist_ddp/base/choices.hpp"
#include "mnist_ddp/base/enum_names.hpp"
#include "mnist_ddp/base/half.hpp"

namespace mnist_ddp {

bool is_powersgd(Compression c);

// Encode/decode a whole buffer (out.size() == in.size()).
void encode16(std::span<const float> in, std::span<std::uint16_t> out, Compression c);
void decode16(std::span<const std::uint16_t> in, std::span<float> out, Compression c);

const char* to_string(Compression c);

}  // namespace mnist_ddp
