#!/usr/bin/env bash
# make-bundle.sh — packs what a GPU machine with CUDA 13 libraries but no MPI/HDF5/oneDNN needs
# to run the GPU suite and benchmark (`make bundle`): stripped binaries, their non-CUDA shared
# libraries, the Open MPI runtime laid out for OPAL_PREFIX, the dataset, and the scripts.
# Output: dist/ (about 55 MB; carry it: `carry: ["dist"]`), then on the device:
#   tools/gpu-suite.sh        (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
out=dist
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/mpi/bin" "$stage/mpi/lib/x86_64-linux-gnu" "$stage/mpi/share"
# Built by `make bundle` into $BUNDLE_BUILD with a portable -march (BUNDLE_ARCH).
B="${BUNDLE_BUILD:-build/bundle}"
bins=("$B/mnist_ddp" "$B/tests/unit_tests" "$B/tests/mpi_tests" "$B/bench/ops_bench" "$B/bench/comm_bench")
for b in "${bins[@]}"; do
  [[ -x "$b" ]] || { echo "make-bundle: $b missing (run make bundle)" >&2; exit 1; }
  strip -o "$stage/bin/$(basename "$b")" "$b"
done
# Open MPI as Debian lays it out under /usr, so OPAL_PREFIX=<bundle>/mpi relocates it.
cp -a /usr/lib/x86_64-linux-gnu/openmpi "$stage/mpi/lib/x86_64-linux-gnu/"
[[ -d /usr/lib/x86_64-linux-gnu/pmix2 ]] && cp -a /usr/lib/x86_64-linux-gnu/pmix2 "$stage/mpi/lib/x86_64-linux-gnu/"
cp -a /usr/share/openmpi "$stage/mpi/share/"
cp -L /usr/bin/orterun "$stage/mpi/bin/mpirun"
cp -L /usr/bin/orted "$stage/mpi/bin/orted"
# Every shared library those need, except glibc and CUDA's (the GPU machine has its own).
objs=("$stage"/bin/* "$stage"/mpi/bin/* $(find "$stage/mpi/lib" -name '*.so*' -type f))
ldd "${objs[@]}" 2>/dev/null | awk '/=>/ {print $3}' | sort -u |
  grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv)\.so|ld-linux|libcuda|libcudnn|libcublas|libnccl|libcudart|libnvidia' |
  while read -r lib; do [[ -f "$lib" ]] && cp -L "$lib" "$stage/lib/"; done
rm -rf "$out"
mkdir -p "$out/data"
tar -C "$stage" -cJf "$out/bundle.tar.xz" .
for f in data/dataset/*.gz; do cp -L "$f" "$out/data/"; done
cp data/dataset/DATASET "$out/data/"
du -sh "$out" "$out/bundle.tar.xz"
echo "make-bundle: carry dist/ to the GPU machine and run tools/gpu-suite.sh there"
