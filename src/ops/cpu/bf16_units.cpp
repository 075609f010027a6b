// bf16_units.cpp — the CPU's bf16 units as oneDNN sees them (bf16_units.hpp).
#include "ops/cpu/bf16_units.hpp"

#include <dnnl.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp::bf16 {
namespace {

// oneDNN's ISA values are bit sets, each containing the ones below it.
bool has_bits(dnnl::cpu_isa isa, dnnl_cpu_isa_t bits) {
  const auto v = static_cast<unsigned>(isa);
  return (v & static_cast<unsigned>(bits)) == static_cast<unsigned>(bits);
}

}  // namespace

Units cpu_units() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (has_bits(isa, dnnl_cpu_isa_avx512_core_amx)) return Units::Amx;
  if (has_bits(isa, dnnl_cpu_isa_avx512_core_bf16)) return Units::Avx512Bf16;
  return Units::None;
}

const char* units_name(Units u) {
  switch (u) {
    case Units::Amx:
      return "AMX-BF16";
    case Units::Avx512Bf16:
      return "AVX512-BF16";
    case Units::None:
      break;
  }
  return "none";
}

std::string isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "SSE4.1";
    case dnnl::cpu_isa::avx:
      return "AVX";
    case dnnl::cpu_isa::avx2:
      return "AVX2";
    case dnnl::cpu_isa::avx2_vnni:
      return "AVX2 with VNNI";
    case dnnl::cpu_isa::avx512_core:
      return "AVX-512";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "AVX-512 with VNNI";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "AVX-512 with AVX512-BF16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "AVX-512 with AVX512-BF16 and AMX-BF16";
    default:
      return "an instruction set oneDNN does not name";
  }
}

void require_units(const char* what) {
  if (cpu_units() != Units::None) return;
  const char* limit = std::getenv("ONEDNN_MAX_CPU_ISA");
  const bool limited = limit != nullptr && *limit != '\0' && std::string(limit) != "ALL" &&
                       std::string(limit) != "all";
  throw UserError(fmt::format(
      "{}: bf16 training on the CPU needs AVX512-BF16 (AMD Zen 4 and later, Intel Cooper Lake) "
      "or AMX-BF16 (Intel Sapphire Rapids and later); this CPU offers {}{}. Drop --amp (fp32 "
      "training), or run on a CPU or GPU with bf16 units",
      what, isa_name(), limited ? fmt::format(" (ONEDNN_MAX_CPU_ISA={} limits it)", limit) : ""));
}

}  // namespace mnist_ddp::bf16
