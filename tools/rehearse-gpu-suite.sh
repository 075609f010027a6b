#!/usr/bin/env bash
# rehearse-gpu-suite.sh — runs tools/gpu-suite.sh's stages here, without a GPU, the way the lent GPU
# machine will meet them: inside a private mount namespace (root + unshare) in which Debian's Open
# MPI, PMIx, UCX, HDF5, oneDNN, OpenBLAS, spdlog/fmt, bc, ssh, rsh, xz and the CUDA toolkit are
# hidden (ssh, rsh and xz are gone from /usr/bin, not replaced: Open MPI looks for its launch agent by
# name, and tar -J for xz), python3 is
# Debian's (torch, h5py) and the CUDA libraries lie in a PyTorch-wheel-like
# site-packages/nvidia/cu13/lib. Every stage must get through its setup (every library found by the
# bundle's wrappers) and then fail for exactly one reason: there is no GPU (MNIST_DDP_REQUIRE_GPU=1
# turns "no usable GPU" into a failure). A missing library, module or command is a rehearsal failure.
#   make bundle && tools/rehearse-gpu-suite.sh [STAGE...]      (default: first test sanitize bench)
# For `first`, every step must reach the GPU probe on its own: its log says "no usable GPU". Then
# the bundle's GPU backend plugin must load with the toolkit's stub libcuda standing in for a driver.
# Results: one summary + log archive per stage in $OUT (default /tmp/gpu-rehearsal), and a verdict
# line per stage here. Exit 0 when every stage stopped only at the missing GPU.
# It runs in a copy of what the device tool sends (the tracked tree, untracked files git does not
# ignore, bundle/bundle.tar.xz and bundle/data), never in this checkout: the suite links ./mnist_ddp and
# build/tests/* to the bundle's wrappers and unpacks into build/gpu-bundle, which must not replace
# this checkout's own build.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
STAGES=("$@")
((${#STAGES[@]})) || STAGES=(first test sanitize bench)
RESULTS="${OUT:-/tmp/gpu-rehearsal}"
[[ $(id -u) -eq 0 ]] || { echo "rehearse-gpu-suite: needs root (unshare -m, bind mounts)" >&2; exit 2; }
[[ -f bundle/bundle.tar.xz ]] || { echo "rehearse-gpu-suite: bundle/bundle.tar.xz missing: make bundle" >&2; exit 2; }
CUDA_LIB="$(readlink -f /usr/local/cuda)/lib"
[[ -f "$CUDA_LIB/libcudnn.so.9" ]] || { echo "rehearse-gpu-suite: no CUDA 13 libraries in $CUDA_LIB" >&2; exit 2; }
SANITIZER="$(readlink -f /usr/local/cuda)/compute-sanitizer"
rm -rf "$RESULTS" && mkdir -p "$RESULTS"
W="$(mktemp -d /tmp/gpu-rehearsal-root.XXXXXX)"
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/empty" "$W/site-packages/nvidia/cu13/lib" "$W/sanitizer" "$W/bin" "$W/usrbin-upper" "$W/usrbin-work" "$W/tree"
# The copy the GPU machine would get.
{ git ls-files -z; git ls-files -z --others --exclude-standard; } | grep -zv '^bundle/' |
  tar --null -T - -cf - | tar -C "$W/tree" -xf -
mkdir -p "$W/tree/bundle" && cp -a bundle/bundle.tar.xz bundle/data "$W/tree/bundle/"
# The toolkit's stub libcuda, as a driver would be found (libcuda.so.1): the bundle's GPU backend
# plugin is loaded with it after the stages (the plugin loads only where a driver is).
mkdir -p "$W/driver"
for d in "$(readlink -f /usr/local/cuda)"/lib64/stubs "$(readlink -f /usr/local/cuda)"/targets/*/lib/stubs; do
  [[ -e "$d/libcuda.so" ]] && cp "$d/libcuda.so" "$W/driver/libcuda.so.1" && break
done
echo "rehearsal: the GPU machine would be sent $(du -sm --apparent-size "$W/tree" | cut -f1) MiB (tree + bundle/)"
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
# ssh, rsh and xz must not exist at all: an overlay over /usr/bin whose upper layer deletes them.
if mount -t overlay overlay -o "lowerdir=/usr/bin,upperdir=$W/usrbin-upper,workdir=$W/usrbin-work" /usr/bin; then
  rm -f /usr/bin/ssh /usr/bin/rsh /usr/bin/xz /usr/bin/unxz /usr/bin/xzcat
fi
for c in ssh rsh xz; do
  if command -v "$c" >/dev/null 2>&1; then echo "rehearsal: could not hide $c ($(command -v "$c"))" >&2; exit 3; fi
done
export PATH="$W/bin:$PATH" PYTHONPATH="$W/site-packages" COMPUTE_SANITIZER="$W/sanitizer/compute-sanitizer"
for s in "$@"; do
  t0=$SECONDS
  OUT="$RESULTS" bash tools/gpu-suite.sh "$s" >"$RESULTS/stdout-$s.txt" 2>&1
  echo "$s $((SECONDS - t0))" >>"$RESULTS/seconds.txt"
done
# The bundle's plugin (libexec/libmnist_ddp_cuda.so) loads under the wrappers' library paths, every
# symbol resolved against the binary, and its device check answers (the stub is no driver).
if [[ -e "$W/driver/libcuda.so.1" && -x ./mnist_ddp ]]; then
  LD_LIBRARY_PATH="$W/driver" ./mnist_ddp --device cuda --print-env >"$RESULTS/plugin-load.txt" 2>&1
fi
IN
(cd "$W/tree" && unshare -m --propagation private bash "$W/inside.sh" "$W" "$CUDA_LIB" "$SANITIZER" "$RESULTS" "${STAGES[@]}")

# The verdict: setup passed, something said "no usable GPU", and nothing says a library, module or
# command is missing.
missing='not found|cannot open shared object|error while loading shared libraries|No module named|command not found|hidden by the rehearsal|symbol lookup error|version .* not found'
bad=0
for s in "${STAGES[@]}"; do
  sum="$RESULTS/summary-$s.txt"
  secs=$(awk -v s="$s" '$1 == s {print $2}' "$RESULTS/seconds.txt" 2>/dev/null)
  logs=$(tar -xzOf "$RESULTS/logs-$s.tar.gz" 2>/dev/null; cat "$sum" "$RESULTS/stdout-$s.txt" 2>/dev/null)
  why=""
  grep -q '^PASS *setup' "$sum" 2>/dev/null || why+=" setup-did-not-pass"
  grep -q 'no usable GPU' <<<"$logs" || why+=" no-'no usable GPU'-anywhere"
  # first: each step on its own reached the GPU probe (its own log says so).
  if [[ $s == first ]]; then
    rm -rf "$W/first-logs" && mkdir -p "$W/first-logs" && tar -C "$W/first-logs" -xzf "$RESULTS/logs-first.tar.gz" 2>/dev/null
    for st in $(awk '$1 == "PASS" || $1 == "FAIL" {print $2}' "$sum" | grep -v '^setup$'); do
      if [[ ! -f "$W/first-logs/$st.log" ]]; then
        why+=" $st-did-not-run"
      elif ! grep -q 'no usable GPU' "$W/first-logs/$st.log"; then
        why+=" $st-did-not-reach-the-gpu-probe"
      fi
    done
    setup_s=$(awk '$1 == "PASS" && $2 == "setup" {print $6}' "$sum")
    echo "rehearsal first: setup (unpacking, wrappers, dataset) took ${setup_s:-?} s (must be < 30)"
    holds() { awk "BEGIN { exit !($*) }" </dev/null 2>/dev/null; }
    holds "${setup_s:-99} < 30" || why+=" setup-took-${setup_s:-?}-s"
    grep -q '^first light: ' <(tail -n 1 "$sum") || why+=" no-verdict-line-last"
  fi
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
if [[ -e "$W/driver/libcuda.so.1" ]]; then
  if grep -q "cudaErrorStubLibrary" "$RESULTS/plugin-load.txt" 2>/dev/null; then
    echo "rehearsal plugin: OK (the bundle's libmnist_ddp_cuda.so loaded with the stub driver: $(grep -o 'cudaErrorStubLibrary' "$RESULTS/plugin-load.txt" | head -1))"
  else
    echo "rehearsal plugin: FAILED: the bundle's GPU backend did not load and answer: $(tail -n 2 "$RESULTS/plugin-load.txt" 2>/dev/null)"
    bad=1
  fi
fi
echo "summaries: $RESULTS/summary-*.txt"
exit "$bad"
