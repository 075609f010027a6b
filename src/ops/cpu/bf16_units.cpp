// bf16_units.cpp — the CPU's bf16 units as oneDNN sees them, and the CPU's instruction set as the
// kernels see it (bf16_units.hpp; cpu_kernel_description in ops.hpp).
#include "ops/cpu/bf16_units.hpp"

#include <cblas.h>
#include <dnnl.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <string>
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

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
#if !defined(__x86_64__)
  // oneDNN's bf16 convolutions used here are its x86 ones (AVX512-BF16, AMX); elsewhere its ISA
  // value is not an x86 bit set at all (aarch64: "all"), so it must not be read as one.
  return Units::None;
#endif
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
#if defined(__aarch64__)
  // The kernel's view of this Arm CPU (oneDNN 2.6 names no aarch64 ISA through its API).
  std::string out = "aarch64 (NEON";
#if defined(__linux__)
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
#ifdef HWCAP_SVE
  if (hw & HWCAP_SVE) out += ", SVE";
#endif
#ifdef HWCAP2_SVE2
  if (hw2 & HWCAP2_SVE2) out += ", SVE2";
#endif
#ifdef HWCAP2_BF16
  if (hw2 & HWCAP2_BF16) out += ", BF16";
#endif
  (void)hw;
  (void)hw2;
#endif
  return out + ")";
#elif !defined(__x86_64__)
  return "a CPU without x86 bf16 units";
#endif
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

namespace mnist_ddp {

std::string cpu_kernel_description() {
  // OpenBLAS's kernel family (OPENBLAS_CORETYPE included), the fc layer's and the reference
  // backend's GEMM; oneDNN's ISA (ONEDNN_MAX_CPU_ISA included), or the Arm features it runs on.
  return fmt::format("{} (oneDNN), OpenBLAS {} kernels", bf16::isa_name(), openblas_get_corename());
}

}  // namespace mnist_ddp
