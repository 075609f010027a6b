// compress.cpp — the hook names and the host buffers' 16-bit encode/decode.
#include "mnist_ddp/comm/compress.hpp"

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {

void encode16(std::span<const float> in, std::span<std::uint16_t> out, Compression c) {
  MNIST_DDP_CHECK(in.size() == out.size() && c != Compression::None, "encode16 sizes/mode");
  if (c == Compression::Fp16) {
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = to_fp16(in[i]);
  } else {
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = to_bf16(in[i]);
  }
}

void decode16(std::span<const std::uint16_t> in, std::span<float> out, Compression c) {
  MNIST_DDP_CHECK(in.size() == out.size() && c != Compression::None, "decode16 sizes/mode");
  if (c == Compression::Fp16) {
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = from_fp16(in[i]);
  } else {
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = from_bf16(in[i]);
  }
}

bool is_powersgd(Compression c) {
  return c == Compression::PowerSgd || c == Compression::PowerSgdFp16 ||
         c == Compression::BatchedPowerSgdFp16;
}

const char* to_string(Compression c) {
  return name_in(kCompressionNames, c);
}

}  // namespace mnist_ddp
