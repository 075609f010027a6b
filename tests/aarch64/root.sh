#!/usr/bin/env bash
# tests/aarch64/root.sh [ROOT] — the arm64 Debian 12 root mnist_ddp is cross-built against and
# tested in (under qemu-user): mmdebstrap from this machine's own Debian sources, the libraries
# the build links (oneDNN, OpenBLAS, Open MPI and MPICH, HDF5, ...) and what the tests run
# (python3, h5diff, mpirun). Made once and kept (default /var/cache/mnist_ddp/arm64-root: CI on a
# machine that made it before reuses it); remade when the package list below changes (its hash
# is stamped in ROOT/.mnist_ddp-packages). Absolute symbolic links inside it (Debian's
# alternatives: cblas.h, libblas.so.3) are made relative, so the cross compiler and linker
# resolve them inside the root, not on this machine. Needs root, mmdebstrap and arch-test;
# prints the root's path.
set -euo pipefail
ROOT="${1:-${MNIST_DDP_ARM64_ROOT:-/var/cache/mnist_ddp/arm64-root}}"
PACKAGES=(
  libstdc++-12-dev libc6-dev pkg-config
  libdnnl-dev libopenblas-dev zlib1g-dev libhdf5-dev
  libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev
  openmpi-bin libopenmpi-dev mpich libmpich-dev
  hdf5-tools python3 procps gawk
)
stamp="$(printf '%s\n' "${PACKAGES[@]}" | sha256sum | cut -c1-16)"
if [[ -f "$ROOT/.mnist_ddp-packages" && "$(cat "$ROOT/.mnist_ddp-packages")" == "$stamp" ]]; then
  echo "$ROOT"
  exit 0
fi
for c in mmdebstrap arch-test; do
  command -v "$c" >/dev/null || { echo "root.sh: $c missing (tools/install-deps.sh --aarch64)" >&2; exit 1; }
done
rm -rf "$ROOT"
mkdir -p "$(dirname "$ROOT")"
# This machine's Debian sources (the only registry it reaches), the same suite.
sources=/etc/apt/sources.list.d/debian.sources
[[ -f $sources ]] || sources=/etc/apt/sources.list
include="$(IFS=,; echo "${PACKAGES[*]}")"
mmdebstrap --arch=arm64 --variant=apt --include="$include" bookworm "$ROOT" "$sources" >&2
# Absolute links -> relative ones inside the root (a link's target read as ROOT + target).
python3 - "$ROOT" <<'PY'
import os, sys
root = sys.argv[1]
n = 0
for top in ("usr", "etc/alternatives"):
    for d, dirs, files in os.walk(os.path.join(root, top)):
        for name in dirs + files:
            p = os.path.join(d, name)
            if os.path.islink(p) and os.readlink(p).startswith("/"):
                target = root + os.readlink(p)
                os.unlink(p)
                os.symlink(os.path.relpath(target, d), p)
                n += 1
print(f"root.sh: {n} absolute links made relative", file=sys.stderr)
PY
echo "$stamp" >"$ROOT/.mnist_ddp-packages"
echo "$ROOT"
