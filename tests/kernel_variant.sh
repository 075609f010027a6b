#!/usr/bin/env bash
# kernel_variant.sh — prints the environment (VAR=value words) that makes this CPU run kernel
# families other than its native ones, for `make test-numeric` and CI's second-kernels stage: a
# numeric bound that holds only for one machine's kernels then fails on any machine.
#   OpenBLAS: the Haswell SGEMM where the native one is SkylakeX-class (Intel Xeon, AMD Zen 4/5 as
#             OpenBLAS 0.3.21 classes them), else SkylakeX on an AVX-512 CPU, else Sandybridge.
#   oneDNN:   one instruction set below the native one (AMX -> AVX512-BF16 -> AVX-512 -> AVX2);
#             nothing on an AVX2-only CPU (below it oneDNN has no JIT convolutions).
# --blas: only the OpenBLAS family other than the one this environment runs (OPENBLAS_CORETYPE
# counted), for the oracle tests that measure float32's spread between two (tests/e2e/lib.sh).
# The binary that reports OpenBLAS's choice: $MNIST_DDP_BIN, else ./mnist_ddp.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${MNIST_DDP_BIN:-./mnist_ddp}"
if [[ "${1:-}" == --blas ]]; then
  core=$(OPENBLAS_VERBOSE=2 "$bin" --version 2>&1 | sed -n 's/^Core: //p' | head -1)
else
  core=$(env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 "$bin" --version 2>&1 | sed -n 's/^Core: //p' | head -1)
fi
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { grep -qw "$1" <<<"$flags"; }
case "$core" in
  SkylakeX | Cooperlake | SapphireRapids) blas=Haswell ;;
  *) if has avx512f; then blas=SkylakeX; else blas=Sandybridge; fi ;;
esac
if has amx_bf16; then isa=AVX512_CORE_BF16
elif has avx512_bf16; then isa=AVX512_CORE
elif has avx512f; then isa=AVX2
else isa=""
fi
if [[ "${1:-}" == --blas ]]; then echo "$blas"; else echo "OPENBLAS_CORETYPE=$blas${isa:+ ONEDNN_MAX_CPU_ISA=$isa}"; fi
