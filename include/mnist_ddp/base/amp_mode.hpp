// amp_mode.hpp — the mixed-precision mode (--amp: off, fp16 or bf16) and its names: vocabulary
// the options, the ops and the communication layer share. What fp16 adds (the dynamic loss scale)
// is ops/grad_scaler.hpp; the CPU's bf16 convolutions are ops/cpu/dnnl_bf16.hpp.
#pragma once

#include <array>

#include "mnist_ddp/base/enum_names.hpp"

namespace mnist_ddp {

enum class AmpMode { Off, Fp16, Bf16 };
inline constexpr std::array<NameOf<AmpMode>, 3> kAmpModeNames{
    {{AmpMode::Off, "off"}, {AmpMode::Fp16, "fp16"}, {AmpMode::Bf16, "bf16"}}};

// "off" | "fp16" | "bf16".
const char* amp_mode_name(AmpMode mode);

}  // namespace mnist_ddp
