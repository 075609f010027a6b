#!/usr/bin/env bash
# gpu-preflight.sh — what a GPU machine offers, in a few seconds, before anything is run on it
# (tools/gpu-suite.sh first's first step; also by hand): the GPU, its driver, compute capability and
# free memory; glibc; which of ssh, rsh, xz and gzip exist (Open MPI 4.1 needs ssh or rsh to start
# even one local job unless OMPI_MCA_plm=isolated); the CUDA library files the bundle's wrappers
# found ($MNIST_DDP_CUDA_LIBS) and the versions PyTorch reports; then `./mnist_ddp --device cuda
# --print-env` on one rank, which prints the libraries it loaded next to those it was built against
# and a line for any major version that differs.
# Writes the lines worth a summary to $PREFLIGHT_HEADER (if set). Exit 0 when the binary ran on the
# GPU; 1 when it ran but saw no usable GPU (every later step will say so too); 3 when it could not
# start at all (a missing library, a loader error, a driver too old, a crash): then nothing else
# can run, and the log holds every diagnostic. Its own limits (5 + 10 + 15 s) fit the step's 40 s.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
HEADER="${PREFLIGHT_HEADER:-/dev/null}"
: >"$HEADER"
say() { echo "$1"; echo "$1" | cut -c1-240 >>"$HEADER"; }
have() { command -v "$1" >/dev/null 2>&1 && echo yes || echo no; }
# python_line: python3's version, torch's (with the CUDA, cuDNN and NCCL it carries), h5py, numpy.
python_line() {
  timeout 10 python3 -c '
import sys
v = ["python " + sys.version.split()[0]]
try:
    import torch
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "?"
    v.append(f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, NCCL {nccl})")
except Exception as e:
    v.append(f"no torch ({type(e).__name__}: {e})")
for m in ("h5py", "numpy"):
    try:
        v.append(f"{m} {__import__(m).__version__}")
    except Exception:
        v.append(f"NO {m} (checkpoint comparisons fail)")
print(", ".join(v))' 2>&1 | tail -n 1
}
if [[ "${1:-}" == --python ]]; then python_line; exit 0; fi

gpu=$(timeout 5 nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.free,memory.total \
  --format=csv,noheader,nounits 2>&1 | head -n 1)
if [[ $gpu == *,*,*,*,* ]]; then
  IFS=',' read -r name drv cc free total <<<"$gpu"
  say "GPU:$name, driver${drv}, compute capability${cc}, memory${free} MiB free of${total} MiB"
else
  say "GPU: nvidia-smi gave no GPU (${gpu:0:120})"
fi
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version 2>/dev/null | head -n 1)
say "host: $(uname -m), $glibc, $(nproc) cores; ssh $(have ssh), rsh $(have rsh), xz $(have xz), gzip $(have gzip); Open MPI launcher: $([[ -n ${OMPI_MCA_plm:-} ]] && echo "plm=$OMPI_MCA_plm" || echo "default (ssh/rsh agent)")"

# The library files, as the wrappers will load them: each soname's directory and the file it
# resolves to (a wheel's file carries no version in its name; the binary's own report below does).
if [[ -n "${MNIST_DDP_CUDA_LIBS:-}" ]]; then
  files=""
  for so in libcudart.so.13 libcublas.so.13 libcudnn.so.9 libnccl.so.2; do
    f=""
    IFS=: read -r -a dirs <<<"$MNIST_DDP_CUDA_LIBS"
    for d in "${dirs[@]}"; do [[ -e "$d/$so" ]] && { f="$d/$so"; break; }; done
    if [[ -n $f ]]; then files+=" $so=$(readlink -f "$f")"; else files+=" $so=MISSING"; fi
  done
  echo "CUDA library files:$files"
  say "CUDA library dirs: $MNIST_DDP_CUDA_LIBS"
else
  say "CUDA library dirs: not searched (no bundle environment)"
fi
py=$(python_line)
say "python3: $py"
[[ -f build/gpu-bundle/BUNDLE-INFO ]] && say "bundle: $(head -n 1 build/gpu-bundle/BUNDLE-INFO)"

# The binary on one rank (no mpirun: a world of one needs none).
out=$(timeout 15 ./mnist_ddp --device cuda --print-env 2>&1)
rc=$?
echo "$out"
while IFS= read -r line; do
  case "$line" in
    *"CUDA libraries"*) say "${line#\[rank 0\] }" ;;
  esac
done <<<"$out"
if ((rc == 0)); then
  say "mnist_ddp --device cuda --print-env: ok ($(grep -m1 -o 'cuda:[0-9]* .*' <<<"$out" | cut -c1-100))"
  exit 0
elif grep -q "no usable GPU" <<<"$out"; then
  say "mnist_ddp --device cuda --print-env: exit $rc, the binary runs but sees no usable GPU"
  exit 1
fi
say "mnist_ddp --device cuda --print-env: CANNOT START (exit $rc): $(grep -v '^\s*$' <<<"$out" | tail -n 1 | cut -c1-160)"
exit 3
