// dtype.cpp — element sizes of the seam types.
#include "mnist_ddp/base/dtype.hpp"

namespace mnist_ddp {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64:
    case DType::U64:
      return 8;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::U8:
      return 1;
  }
  return 1;
}

bool is_half(DType t) {
  return t == DType::F16 || t == DType::BF16;
}

}  // namespace mnist_ddp
