#!/usr/bin/env bash
# make-bundle.sh — packs what a GPU machine with CUDA 13 libraries but no MPI/HDF5/oneDNN needs
# to run the GPU suite and benchmark (`make bundle`): stripped binaries, their non-CUDA shared
# libraries, the Open MPI runtime laid out for OPAL_PREFIX (with Debian's PMIx, UCX and MCA
# defaults), wrapper scripts, and the dataset.
# Output: bundle/ (carry it: `carry: ["bundle"]`), then on the device, from the repository root:
#   tools/gpu-suite.sh first|test|sanitize|bench|all
# What travels (bundle/ plus the tracked tree) must stay within MNIST_DDP_CARRY_LIMIT_MIB (default 60;
# the device tool takes 64 MiB): the total is printed, and the script fails above it.
# bundle/bundle.tar.xz is xz (26 MB; gzip made 45 MB, which with the 30 MB dataset did not fit): the
# GPU image may lack the xz program, so tools/gpu-suite.sh unpacks with python3's tarfile (its lzma
# module) there. Inside it:
#   bin/NAME        wrappers (mnist_ddp, unit_tests, mpi_tests, ops_bench, comm_bench, gpu_ops_bench, gpu_conv_algos, mpirun):
#                   source bin/bundle-env.sh, which sets LD_LIBRARY_PATH (bundle lib/, then the
#                   CUDA libraries found on that machine), OPAL_PREFIX and PMIx's directories for
#                   that process only, then exec libexec/NAME. Usable outside the suite, also
#                   through a symlink (./mnist_ddp -> build/gpu-bundle/bin/mnist_ddp).
#   libexec/        the real binaries, and mnist_ddp's GPU backend (libmnist_ddp_cuda.so)
#                                              lib/   their libraries except glibc and CUDA's
#   mpi/            Open MPI as Debian lays it out under /usr (mpi/bin: wrappers of orterun and
#                   orted), Debian's /etc/openmpi in mpi/etc, PMIx 4 in mpi/lib/x86_64-linux-gnu/pmix2
#   BUNDLE-INFO     what was built, from which commit, and the CUDA sonames the binaries need
set -euo pipefail
cd "$(dirname "$0")/.."
out="${BUNDLE_OUT:-bundle}"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
ML=mpi/lib/x86_64-linux-gnu   # Debian's libdir relative to the /usr prefix that OPAL_PREFIX replaces
mkdir -p "$stage/bin" "$stage/libexec" "$stage/lib/ucx" "$stage/mpi/bin" "$stage/mpi/libexec" \
  "$stage/$ML" "$stage/mpi/share" "$stage/mpi/etc"
# Built by `make bundle` into $BUNDLE_BUILD with a portable -march (BUNDLE_ARCH).
B="${BUNDLE_BUILD:-build/bundle}"
bins=("$B/mnist_ddp" "$B/tests/unit_tests" "$B/tests/mpi_tests" "$B/bench/ops_bench" "$B/bench/comm_bench"
  "$B/bench/gpu_ops_bench" "$B/bench/gpu_conv_algos")
for b in "${bins[@]}"; do
  [[ -x "$b" ]] || { echo "make-bundle: $b missing (run make bundle)" >&2; exit 1; }
  strip -o "$stage/libexec/$(basename "$b")" "$b"
done
# mnist_ddp's GPU backend, a plugin it loads from its own directory (app/cuda_backend.hpp).
[[ -e "$B/libmnist_ddp_cuda.so" ]] || { echo "make-bundle: $B/libmnist_ddp_cuda.so missing (run make bundle)" >&2; exit 1; }
strip --strip-unneeded -o "$stage/libexec/libmnist_ddp_cuda.so" "$B/libmnist_ddp_cuda.so"
# Open MPI as Debian lays it out under /usr, so OPAL_PREFIX=<bundle>/mpi relocates it. Its MCA
# defaults (/etc/openmpi: pml ^ucx, btl ^openib..., which tests/mpi_env.sh then overrides) come
# along, read through OPAL_SYSCONFDIR, so launches there behave as here.
cp -a /usr/lib/x86_64-linux-gnu/openmpi "$stage/$ML/"
[[ -d /usr/lib/x86_64-linux-gnu/pmix2 ]] && cp -a /usr/lib/x86_64-linux-gnu/pmix2 "$stage/$ML/"
cp -a /usr/share/openmpi "$stage/mpi/share/"
# Headers and static archives only serve compilers: left out (~10 MB).
rm -rf "$stage/$ML/openmpi/include"
find "$stage/mpi" \( -name '*.a' -o -name '*.la' \) -delete
[[ -d /etc/openmpi ]] && cp -a /etc/openmpi/. "$stage/mpi/etc/"
cp -L /usr/bin/orterun "$stage/mpi/libexec/orterun"
cp -L /usr/bin/orted "$stage/mpi/libexec/orted"
# UCX (pml ucx, as in tests/mpi_env.sh): libucp/libucs/libuct come with ldd below; its transport
# modules are looked up next to libucs (lib/ucx). Only CMA: the InfiniBand/RDMA-CM modules would
# drag in libibverbs, which warns without its provider configuration; tcp, posix, sysv and self are
# built into libuct.
for m in /usr/lib/x86_64-linux-gnu/ucx/libuct_cma.so*; do [[ -e $m ]] && cp -a "$m" "$stage/lib/ucx/"; done
# Every shared library those need, except glibc and CUDA's (the GPU machine has its own: PyTorch's
# wheels or a toolkit; bin/bundle-env.sh finds them there).
mapfile -t objs < <(find "$stage/libexec" "$stage/mpi/libexec" "$stage/mpi/lib" "$stage/lib/ucx" -type f \
  \( -name '*.so*' -o -perm -u+x \))
lddq() { ldd "$@" 2>/dev/null || true; }  # a non-ELF file among them must not stop the bundle
skip='/(libc|libm|libpthread|libdl|librt|libresolv|libutil)\.so|ld-linux|libcuda\.|libcudnn|libcublas|libnccl|libcudart|libnvidia|libnvrtc|libnvJitLink'
lddq "${objs[@]}" | awk '/=>/ && $3 ~ /^\// {print $3}' | sort -u | grep -vE "$skip" |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
missing=$(lddq "${objs[@]}" | awk '/=> not found/ {print $1}' | sort -u | grep -vE "$skip" || true)
[[ -z "$missing" ]] || echo "make-bundle: warning: not found here, not bundled: $(tr "\n" " " <<<"$missing")" >&2

# --- wrappers -------------------------------------------------------------------------------------
cat > "$stage/bin/bundle-env.sh" <<'ENV'
# bundle-env.sh — sourced by the bundle's wrappers (made by tools/make-bundle.sh) right before they
# exec a real binary: sets, for that process and its children only, LD_LIBRARY_PATH = the bundle's
# lib/ then the CUDA 13 libraries of this machine, OPAL_PREFIX and PMIx's directories. The CUDA
# libraries are looked up in $MNIST_DDP_CUDA_LIBS if set (colon-separated directories), else in
# python3's site-packages (nvidia/*/lib of PyTorch's wheels, torch/lib), /usr/local/cuda and the
# system's linker cache; a missing one is an error naming it.
MNIST_DDP_BUNDLE="$(cd "$(dirname "$(readlink -f -- "${BASH_SOURCE[0]}")")/.." && pwd)"
MNIST_DDP_CUDA_NEEDED="libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libcudnn_graph.so.9 libcudnn_ops.so.9 libcudnn_cnn.so.9 libcudnn_engines_precompiled.so.9 libcudnn_heuristic.so.9 libnccl.so.2"

# mnist_ddp_cuda_dirs: candidate directories, one per line, in search order.
mnist_ddp_cuda_dirs() {
  local sp d
  # python3 without the bundle's libraries (a wrapper may run under another wrapper's environment).
  for sp in $(env -u LD_LIBRARY_PATH python3 -c '
import site, sys
seen = []
for p in list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path:
    if p.endswith(("site-packages", "dist-packages")) and p not in seen:
        seen.append(p)
print("\n".join(seen))' 2>/dev/null); do
    for d in "$sp"/nvidia/*/lib "$sp"/torch/lib; do [[ -d $d ]] && echo "$d"; done
  done
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib; do
    [[ -d $d ]] && echo "$d"
  done
  return 0
}

# mnist_ddp_find_cuda: sets MNIST_DDP_CUDA_LIBS (directories holding the needed libraries, in
# order) or returns 1 after naming what is missing on stderr.
mnist_ddp_find_cuda() {
  local cands=() dirs=() so d found missing=() sys=""
  if [[ -n "${MNIST_DDP_CUDA_LIBS:-}" ]]; then
    IFS=: read -r -a cands <<<"$MNIST_DDP_CUDA_LIBS"
  else
    mapfile -t cands < <(mnist_ddp_cuda_dirs)
  fi
  for so in $MNIST_DDP_CUDA_NEEDED; do
    found=""
    for d in "${cands[@]}"; do
      if [[ -e "$d/$so" ]]; then
        found=$d
        [[ " ${dirs[*]} " == *" $d "* ]] || dirs+=("$d")
        break
      fi
    done
    # else the system's linker cache (an entry whose file exists: "so (libc6,x86-64) => /path")
    [[ -n $found || -n $sys ]] || sys=$( (ldconfig -p || /sbin/ldconfig -p) 2>/dev/null)
    [[ -n $found ]] || awk -v so="$so" '$1 == so && /x86-64/ { if (system("test -e \"" $NF "\"") == 0) f = 1 }
      END { exit !f }' <<<"$sys" || missing+=("$so")
  done
  if ((${#missing[@]})); then
    echo "mnist_ddp bundle: CUDA libraries not found: ${missing[*]}" >&2
    echo "  searched: ${cands[*]:-(no candidate directories)} and the system linker cache" >&2
    echo "  (install PyTorch's CUDA 13 wheels or a CUDA 13 toolkit with cuDNN 9 and NCCL 2, or set MNIST_DDP_CUDA_LIBS)" >&2
    return 1
  fi
  # Also the other nvidia/*/lib directories (NVRTC and nvJitLink for cuDNN's runtime-compiled
  # engines live beside them in the wheels).
  for d in "${cands[@]}"; do
    [[ $d == */nvidia/*/lib && " ${dirs[*]} " != *" $d "* ]] && dirs+=("$d")
  done
  MNIST_DDP_CUDA_LIBS=$(IFS=:; echo "${dirs[*]}")
  export MNIST_DDP_CUDA_LIBS
}

mnist_ddp_bundle_env() {
  mnist_ddp_find_cuda || return 1
  local front="$MNIST_DDP_BUNDLE/lib${MNIST_DDP_CUDA_LIBS:+:$MNIST_DDP_CUDA_LIBS}"
  case "${LD_LIBRARY_PATH:-}" in
    "$front" | "$front":*) ;;  # already set by an outer wrapper (mpirun -> ranks)
    *) export LD_LIBRARY_PATH="$front${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
  esac
  local px="$MNIST_DDP_BUNDLE/mpi/lib/x86_64-linux-gnu/pmix2"
  # Open MPI relocated: prefix, its MCA defaults (Debian's /etc/openmpi, copied to mpi/etc).
  export OPAL_PREFIX="$MNIST_DDP_BUNDLE/mpi" OPAL_SYSCONFDIR="$MNIST_DDP_BUNDLE/mpi/etc"
  # PMIx 4 (Debian's external libpmix2): its libdir, datadir and sysconfdir are absolute paths
  # under /usr/lib/x86_64-linux-gnu/pmix2 (PMIX_PREFIX alone moves nothing), and its
  # pmix-mca-params.conf names that component path: point every one of them into the bundle, and
  # give the component path explicitly (the environment wins over the file) so PMIx neither prints
  # "The pmix_mca_base_component_path MCA variable was used to add paths ... failed to add" nor
  # misses its plugins and help texts.
  export PMIX_PREFIX="$px" PMIX_EXEC_PREFIX="$px" PMIX_LIBDIR="$px/lib" PMIX_PKGLIBDIR="$px/lib/pmix" \
    PMIX_DATAROOTDIR="$px/share" PMIX_DATADIR="$px/share" PMIX_PKGDATADIR="$px/share/pmix" \
    PMIX_SYSCONFDIR="$px/share" PMIX_MCA_mca_base_component_path="$px/lib/pmix"
  # UCX modules next to the bundled libucs; a world of one without mpirun needs no orted.
  export UCX_MODULE_DIR="$MNIST_DDP_BUNDLE/lib/ucx"
  export OMPI_MCA_ess_singleton_isolated="${OMPI_MCA_ess_singleton_isolated:-1}"
  # Open MPI 4.1's launcher needs ssh or rsh even for a job on this one machine ("plm_rsh_agent
  # ... could not be found"); without either, the isolated launcher starts local ranks alone.
  if [[ -z "${OMPI_MCA_plm:-}" ]] && ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
    export OMPI_MCA_plm=isolated
  fi
}
ENV

# wrapper NAME REAL: bin/NAME (or mpi/bin/NAME) runs REAL (relative to the bundle root).
wrapper() {
  local path="$1" real="$2"
  cat > "$stage/$path" <<W
#!/usr/bin/env bash
# $(basename "$path") — wrapper made by tools/make-bundle.sh: runs $real with the bundle's and this
# machine's CUDA libraries (bin/bundle-env.sh) set for it alone.
source "\$(dirname "\$(readlink -f -- "\${BASH_SOURCE[0]}")")/$(realpath --relative-to="$(dirname "$stage/$path")" "$stage/bin")/bundle-env.sh" || exit 127
mnist_ddp_bundle_env || exit 127
exec "\$MNIST_DDP_BUNDLE/$real" "\$@"
W
  chmod +x "$stage/$path"
}
for b in "${bins[@]}"; do wrapper "bin/$(basename "$b")" "libexec/$(basename "$b")"; done
for n in mpirun mpiexec orterun; do wrapper "mpi/bin/$n" mpi/libexec/orterun; done
wrapper mpi/bin/orted mpi/libexec/orted
ln -s ../mpi/bin/mpirun "$stage/bin/mpirun"

{
  echo "mnist_ddp bundle: $(git describe --always --dirty 2>/dev/null || echo unknown), built $(date -u +%Y-%m-%dT%H:%MZ) on $(hostname)"
  echo "binaries: ${bins[*]}"
  echo "CUDA libraries needed (found on the target by bin/bundle-env.sh):"
  readelf -d "$stage/libexec/libmnist_ddp_cuda.so" | awk '/NEEDED/ && /cu|nccl/ {print "  " $NF}' | tr -d '[]'
  echo "bundled libraries: $(ls "$stage/lib" | wc -l) (lib/), Open MPI $(orterun --version 2>/dev/null | head -1 | awk '{print $NF}')"
} > "$stage/BUNDLE-INFO"

rm -rf "$out"
mkdir -p "$out/data"
tar -C "$stage" -cf - . | xz -9 -T0 >"$out/bundle.tar.xz"
for f in data/dataset/*.gz; do cp -L "$f" "$out/data/"; done
cp data/dataset/DATASET "$out/data/"
# What the device tool sends: the tracked tree (and untracked files git does not ignore) plus bundle/.
limit_mib="${MNIST_DDP_CARRY_LIMIT_MIB:-60}"
tree_bytes=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } 2>/dev/null |
  xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
out_bytes=$(du -sb "$out" | awk '{ print $1 }')
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "make-bundle: $out/bundle.tar.xz $(mib "$(stat -c %s "$out/bundle.tar.xz")") MiB, $out/data $(mib "$(du -sb "$out/data" | awk '{ print $1 }')") MiB"
echo "make-bundle: carried $(mib $((tree_bytes + out_bytes))) MiB = tree $(mib "$tree_bytes") + $out $(mib "$out_bytes") (limit $limit_mib MiB)"
if ((tree_bytes + out_bytes > limit_mib * 1048576)); then
  echo "make-bundle: over the $limit_mib MiB the GPU machine can be sent: leave something out of $out" >&2
  exit 1
fi
echo "make-bundle: carry $out/ to the GPU machine and run tools/gpu-suite.sh there"
