// bf16_units.hpp — which bf16 units this CPU offers oneDNN (AMX-BF16 tiles, AVX512-BF16
// instructions, or none; ONEDNN_MAX_CPU_ISA counts, as oneDNN dispatches by it), named for the
// start-up line, and the one error --amp bf16 gives on a CPU without them.
#pragma once

#include <string>

namespace mnist_ddp::bf16 {

enum class Units { None, Avx512Bf16, Amx };
Units cpu_units();
// "AMX-BF16", "AVX512-BF16" or "none".
const char* units_name(Units u);
// oneDNN's view of the CPU's instruction set in words ("AVX-512 with AVX512-BF16", "AVX2", ...).
std::string isa_name();
// Throws a UserError naming the CPU's instruction set (and ONEDNN_MAX_CPU_ISA where it limits
// it) where it has no bf16 units; `what` leads the message (the flag).
void require_units(const char* what);

}  // namespace mnist_ddp::bf16
