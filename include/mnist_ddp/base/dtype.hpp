// dtype.hpp — the element types that cross a seam between components: collectives (Comm) and the
// gradient hooks' 16-bit casts (Ops). F16 and BF16 are IEEE half and bfloat16 held as uint16
// bits; one name table for logs and collective fingerprints.
#pragma once

#include <cstddef>

#include "mnist_ddp/base/enum_names.hpp"

namespace mnist_ddp {

enum class DType { F32, F64, I32, I64, U64, U8, F16, BF16 };
inline constexpr std::array<NameOf<DType>, 8> kDTypeNames{{{DType::F32, "f32"},
                                                           {DType::F64, "f64"},
                                                           {DType::I32, "i32"},
                                                           {DType::I64, "i64"},
                                                           {DType::U64, "u64"},
                                                           {DType::U8, "u8"},
                                                           {DType::F16, "fp16"},
                                                           {DType::BF16, "bf16"}}};

// Bytes per element.
std::size_t dtype_size(DType t);
// True for the 16-bit float types (F16, BF16).
bool is_half(DType t);

}  // namespace mnist_ddp
