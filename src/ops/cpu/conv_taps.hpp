// conv_taps.hpp — the filter width as a compile-time constant for the intrinsic convolution
// kernels (conv1_avx2.cpp, conv2_filter_grad_avx2.cpp): their register tiles are sized by it.
#pragma once

namespace mnist_ddp::blocked {

inline constexpr int kMaxTaps = 7;  // filter widths up to 7 (the model's is 5)

// Calls f.template operator()<R>() with the filter width r (1..kMaxTaps; the caller checks it)
// as a constant.
template <typename F>
void with_taps(int r, F&& f) {
  switch (r) {
    case 1:
      return f.template operator()<1>();
    case 2:
      return f.template operator()<2>();
    case 3:
      return f.template operator()<3>();
    case 4:
      return f.template operator()<4>();
    case 5:
      return f.template operator()<5>();
    case 6:
      return f.template operator()<6>();
    default:
      return f.template operator()<7>();
  }
}

}  // namespace mnist_ddp::blocked
