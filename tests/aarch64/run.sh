#!/usr/bin/env bash
# tests/aarch64/run.sh — `make test-aarch64`: mnist_ddp built for aarch64 (GH200's Grace CPUs) and
# tested there as far as an x86 machine can: cross-built with Debian's aarch64-linux-gnu-g++
# against an arm64 Debian root (tests/aarch64/root.sh: oneDNN, OpenBLAS, Open MPI, HDF5 of that
# architecture), then the unit suite, the MPI suite under mpirun -np 2 and the end-to-end cases
# of training, checkpoints and bit-exact resume run inside that root under
# qemu-user (binfmt_misc): the unit suite's oracles (each op against finite differences in
# double, oneDNN against the reference kernels, bounds from error models) on aarch64's kernels as
# they stand, and tests/aarch64/e2e_test.sh. Cross-compiling, not building natively under emulation: the same
# compiler version and flags, minutes instead of an hour. Needs root (chroot, mounts, binfmt).
# Prints each case and ends with "N passed, M failed, K skipped" like tests/run_tests.sh.
#   AARCH64_FLAGS  the target (default -mcpu=neoverse-n2: GCC 12.2 knows no neoverse-v2; N2 is
#                  the same Armv9 + SVE2 family, and Grace's -mcpu=neoverse-v2 needs GCC >= 12.3)
#   QEMU_CPU       the emulated CPU (default: every feature, 128-bit SVE vectors as on Grace)
# --build-only: the root and the cross build, no tests (CI builds them while other stages run).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO="$PWD"
if [[ $(id -u) -ne 0 ]]; then
  echo "skip - aarch64 tests (they chroot into an arm64 root and register qemu: run as root)"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
fi
t0=$SECONDS
# arm64 programs (mmdebstrap's maintainer scripts too) run through qemu-user: the kernel's
# binfmt_misc, the F flag (qemu opened at registration, so it works inside the chroot without a
# copy of it there). Registered before the root is made: a fresh machine may have neither.
[[ -e /proc/sys/fs/binfmt_misc/status ]] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
[[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || update-binfmts --enable qemu-aarch64
if [[ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
  echo "aarch64: qemu-aarch64 is not registered with binfmt_misc (qemu-user-static installed?)"
  exit 1
fi
ROOT="$(tests/aarch64/root.sh)" || { echo "aarch64: could not make the arm64 root"; exit 1; }
echo "== arm64 root $ROOT ready ($((SECONDS - t0)) s)"

# The cross build: its own tree, build/aarch64/.
export MNIST_DDP_SYSROOT="$ROOT" PKG_CONFIG_SYSROOT_DIR="$ROOT"
export PKG_CONFIG_LIBDIR="$ROOT/usr/lib/aarch64-linux-gnu/pkgconfig:$ROOT/usr/share/pkgconfig"
B=build/aarch64
t1=$SECONDS
if ! make --no-print-directory -j"$(nproc)" BUILD=$B BIN=$B/mnist_ddp USE_CUDA=0 \
  MPICXX="$REPO/tests/aarch64/mpicxx" ARCH_FLAGS="${AARCH64_FLAGS:--mcpu=neoverse-n2}" \
  all $B/tests/unit_tests $B/tests/mpi_tests >"$B.log" 2>&1; then
  tail -n 30 "$B.log"
  echo "aarch64: the cross build failed (log: $B.log)"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
machine=$(readelf -h $B/mnist_ddp | sed -n 's/ *Machine: *//p')
echo "== cross build: $B/mnist_ddp for $machine ($((SECONDS - t1)) s)"
[[ "${1:-}" == --build-only ]] && exit 0

# Inside the root: a private mount namespace with /proc, /dev, the checkout at its own path, the
# dataset's Debian files, a fresh /tmp. Open MPI on its own shared-memory transport without
# single-copy (qemu-user does not translate process_vm_readv), one rank per core as here.
export QEMU_CPU="${QEMU_CPU:-max,sve-default-vector-length=16}"
cat >"$ROOT/tmp/aarch64-suite.sh" <<EOS
set -uo pipefail
cd "$REPO"
export MNIST_DDP_MPI_PML=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export MNIST_DDP_BIN="$REPO/$B/mnist_ddp" SUITE_TIMEOUT=1800
source tests/mpi_env.sh
LOG="\$(mktemp -d /tmp/mnist_ddp_aarch64.XXXXXX)"
source tests/suite_lib.sh
echo "== on \$(uname -m) (qemu-user, QEMU_CPU=\$QEMU_CPU): \$($REPO/$B/mnist_ddp --version)"
gtest aarch64_unit "$REPO/$B/tests/unit_tests"
gtest aarch64_mpi_np2 mpirun -np 2 "$REPO/$B/tests/mpi_tests"
shell tests/aarch64/e2e_test.sh
print_skips
if ((\${#failures[@]})); then printf 'FAILED: %s\n' "\${failures[@]}"; fi
echo "aarch64: \$passed passed, \$failed failed, \$skipped skipped"
((failed == 0))
EOS
mkdir -p "$ROOT$REPO" "$ROOT/usr/share/datasets"
unshare -m --propagation private bash -c '
  set -e
  r="$1"; repo="$2"
  mount -t proc proc "$r/proc"
  mount --rbind /dev "$r/dev"
  mount --rbind /sys "$r/sys"
  mount --bind "$repo" "$r$repo"
  [[ -d /usr/share/datasets ]] && mount --bind /usr/share/datasets "$r/usr/share/datasets"
  mkdir -p "$r/tmp/mnist_ddp_aarch64_tmp"
  exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    QEMU_CPU="$QEMU_CPU" TMPDIR=/tmp bash /tmp/aarch64-suite.sh' _ "$ROOT" "$REPO"
rc=$?
echo "== aarch64 stage: $((SECONDS - t0)) s"
exit $rc
