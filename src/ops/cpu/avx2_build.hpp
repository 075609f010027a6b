// avx2_build.hpp — whether this build targets AVX2 and FMA (x86-64-v3, or -march=native on such a
// CPU): the CPU backend's intrinsic kernels (blocked_avx2.cpp, conv1_avx2.cpp) exist only
// then; elsewhere the portable code and oneDNN run in their place.
#pragma once

namespace mnist_ddp {

#if defined(__AVX2__) && defined(__FMA__)
inline constexpr bool kAvx2Build = true;
#else
inline constexpr bool kAvx2Build = false;
#endif

}  // namespace mnist_ddp
