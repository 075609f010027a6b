#!/usr/bin/env bash
# rehearse-gpu-suite.sh — runs tools/gpu-suite.sh's stages here, without a GPU, the way the lent GPU
# machine will meet them: inside a private mount namespace (root + unshare) in which Debian's Open
# MPI, PMIx, UCX, HDF5, oneDNN, OpenBLAS, spdlog/fmt, bc and the CUDA toolkit are hidden, python3 is
# Debian's (torch, h5py) and the CUDA libraries lie in a PyTorch-wheel-like
# site-packages/nvidia/cu13/lib. Every stage must get through its setup (every library found by the
# bundle's wrappers) and then fail for exactly one reason: there is no GPU (MNIST_DDP_REQUIRE_GPU=1
# turns "no usable GPU" into a failure). A missing library, module or command is a rehearsal failure.
#   make bundle && tools/rehearse-gpu-suite.sh [STAGE...]      (default: test sanitize bench)
# Results: one summary + log archive per stage in $OUT (default /tmp/gpu-rehearsal), and a verdict
# line per stage here. Exit 0 when every stage stopped only at the missing GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
STAGES=("$@")
((${#STAGES[@]})) || STAGES=(test sanitize bench)
RESULTS="${OUT:-/tmp/gpu-rehearsal}"
[[ $(id -u) -eq 0 ]] || { echo "rehearse-gpu-suite: needs root (unshare -m, bind mounts)" >&2; exit 2; }
[[ -f dist/bundle.tar.xz ]] || { echo "rehearse-gpu-suite: dist/bundle.tar.xz missing: make bundle" >&2; exit 2; }
CUDA_LIB="$(readlink -f /usr/local/cuda)/lib"
[[ -f "$CUDA_LIB/libcudnn.so.9" ]] || { echo "rehearse-gpu-suite: no CUDA 13 libraries in $CUDA_LIB" >&2; exit 2; }
SANITIZER="$(readlink -f /usr/local/cuda)/compute-sanitizer"
rm -rf "$RESULTS" && mkdir -p "$RESULTS"
W="$(mktemp -d /tmp/gpu-rehearsal-root.XXXXXX)"
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/empty" "$W/site-packages/nvidia/cu13/lib" "$W/sanitizer" "$W/bin"
: >"$W/emptyfile"
printf '#!/bin/sh\necho "$(basename "$0"): not on the GPU machine (hidden by the rehearsal)" >&2\nexit 127\n' >"$W/absent"
chmod +x "$W/absent"
# python3: the image's holds torch, h5py and numpy with their own libraries; Debian's needs the
# very libraries hidden below, so it runs in this script's (outer) mount namespace.
printf '#!/bin/sh\nexec nsenter --mount=/proc/%s/ns/mnt --wd="$PWD" /usr/bin/python3 "$@"\n' "$$" >"$W/bin/python3"
chmod +x "$W/bin/python3"

# Inside the namespace: bind the CUDA libraries and compute-sanitizer where the GPU image has them,
# then hide what the GPU image lacks, then run each stage.
cat >"$W/inside.sh" <<'IN'
set -u
W="$1" CUDA_LIB="$2" SANITIZER="$3" RESULTS="$4"; shift 4
mount --bind "$CUDA_LIB" "$W/site-packages/nvidia/cu13/lib"
[[ -d "$SANITIZER" ]] && mount --bind "$SANITIZER" "$W/sanitizer"
L=/usr/lib/x86_64-linux-gnu
for d in "$L/openmpi" "$L/pmix2" "$L/ucx" "$L/openblas-pthread" "$L/hdf5" /usr/share/openmpi /etc/openmpi \
         "$(readlink -f /usr/local/cuda)"; do
  [[ -d $d ]] && mount --bind "$W/empty" "$d"
done
for f in "$L"/libmpi*.so* "$L"/libopen-pal*.so* "$L"/libopen-rte*.so* "$L"/libhdf5*.so* "$L"/libdnnl*.so* \
         "$L"/libuc[pstm]*.so* "$L"/libpmix*.so* "$L"/libopenblas*.so* "$L"/libblas*.so* "$L"/liblapack*.so* \
         "$L"/libspdlog*.so* "$L"/libfmt*.so* "$L"/libsz*.so* "$L"/libaec*.so*; do
  [[ -f $f && ! -L $f ]] && mount --bind "$W/emptyfile" "$f"
done
for c in /usr/bin/bc /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/orterun /usr/bin/orted; do
  [[ -e $c ]] && mount --bind "$W/absent" "$(readlink -f "$c")"
done
export PATH="$W/bin:$PATH" PYTHONPATH="$W/site-packages" COMPUTE_SANITIZER="$W/sanitizer/compute-sanitizer"
for s in "$@"; do
  t0=$SECONDS
  OUT="$RESULTS" bash tools/gpu-suite.sh "$s" >"$RESULTS/console-$s.txt" 2>&1
  echo "$s $((SECONDS - t0))" >>"$RESULTS/seconds.txt"
done
IN
unshare -m --propagation private bash "$W/inside.sh" "$W" "$CUDA_LIB" "$SANITIZER" "$RESULTS" "${STAGES[@]}"

# The verdict: setup passed, something said "no usable GPU", and nothing says a library, module or
# command is missing.
missing='not found|cannot open shared object|error while loading shared libraries|No module named|command not found|hidden by the rehearsal|symbol lookup error|version .* not found'
bad=0
for s in "${STAGES[@]}"; do
  sum="$RESULTS/summary-$s.txt"
  secs=$(awk -v s="$s" '$1 == s {print $2}' "$RESULTS/seconds.txt" 2>/dev/null)
  logs=$(tar -xzOf "$RESULTS/logs-$s.tar.gz" 2>/dev/null; cat "$sum" "$RESULTS/console-$s.txt" 2>/dev/null)
  why=""
  grep -q '^PASS *setup' "$sum" 2>/dev/null || why+=" setup-did-not-pass"
  grep -q 'no usable GPU' <<<"$logs" || why+=" no-'no usable GPU'-anywhere"
  hit=$(grep -E -m1 "$missing" <<<"$logs")
  # This toolkit may lack compute-sanitizer (the GPU image has it): then the sanitize stage's
  # stop at the GPU probe is what counts.
  if [[ $s == sanitize && ! -x "$SANITIZER/compute-sanitizer" ]] && grep -q '^FAIL *gpu_probe' "$sum"; then
    hit=""
  fi
  [[ -z $hit ]] || why+=" missing-part: ${hit:0:160}"
  if [[ -z $why ]]; then
    echo "rehearsal $s: OK in ${secs:-?} s (setup passed; stopped at 'no usable GPU'; nothing missing)"
  else
    echo "rehearsal $s: FAILED in ${secs:-?} s:$why"
    bad=1
  fi
done
echo "summaries: $RESULTS/summary-*.txt"
exit "$bad"
