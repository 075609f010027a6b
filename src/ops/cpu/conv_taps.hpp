// conv_taps.hpp — the filter width as a compile-time constant for the intrinsic convolution
// kernels (conv1_avx2.cpp, conv2_filter_grad_avx2.cpp, conv1_bf16.cpp): their register tiles are
// sized by it.
#pragma once

namespace mnist_ddp::blocked {

inline constexpr int kMaxTaps = 7;  // filter widths up to 7 (the model's is 5)

// Calls f.template operator()<r>() for r in From..Max - 1, f.template operator()<Max>() for any
// other r (the caller checks r).
template <int From, int Max, typename F>
void with_taps_from(int r, F&& f) {
  if constexpr (From < Max) {
    if (r == From) return f.template operator()<From>();
    return with_taps_from<From + 1, Max>(r, f);
  } else {
    return f.template operator()<Max>();
  }
}

// Calls f.template operator()<R>() with the filter width r (1..Max, Max <= kMaxTaps; the caller
// checks it) as a constant.
template <int Max = kMaxTaps, typename F>
void with_taps(int r, F&& f) {
  static_assert(Max >= 1 && Max <= kMaxTaps);
  with_taps_from<1, Max>(r, f);
}

}  // namespace mnist_ddp::blocked
