#!/usr/bin/env bash
# tests/mpich/run.sh — `make test-mpich`: mnist_ddp built with Debian's MPICH (the MPICH family:
# Cray MPICH, Intel MPI and MVAPICH derive from it) in its own tree, build/mpich/, beside the Open
# MPI build, and tested there: the unit suite, the MPI suite under mpiexec.hydra -n 2 and -n 4,
# and tests/mpich/e2e_test.sh (training, bitwise agreement with the Open MPI build, resume, the
# refusals, rank and local rank under Hydra, the launcher-mismatch checks, srun --mpi=pmi2 on the
# local Slurm). Ends with "N passed, M failed, K skipped" like tests/run_tests.sh.
# --build-only: the build, no tests (CI builds it while other stages run).
set -uo pipefail
cd "$(dirname "$0")/../.."
MPICXX_MPICH="${MPICXX_MPICH:-mpicxx.mpich}"
if ! command -v "$MPICXX_MPICH" >/dev/null || ! command -v mpiexec.mpich >/dev/null; then
  echo "mpich: $MPICXX_MPICH or mpiexec.mpich missing (tools/install-deps.sh --mpich)"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
t0=$SECONDS
B=build/mpich
if ! make --no-print-directory -j"$(nproc)" BUILD=$B BIN=$B/mnist_ddp USE_CUDA=0 MPICXX="$MPICXX_MPICH" \
  MPIRUN=mpiexec.mpich all $B/tests/unit_tests $B/tests/mpi_tests >"$B.log" 2>&1; then
  tail -n 30 "$B.log"
  echo "mpich: the build failed (log: $B.log)"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
echo "== MPICH build: $B/mnist_ddp ($($MPICXX_MPICH -v 2>&1 | head -1 | cut -c1-60); $((SECONDS - t0)) s)"
[[ "${1:-}" == --build-only ]] && exit 0
LOG="$(mktemp -d /tmp/mnist_ddp_mpich.XXXXXX)"
source tests/suite_lib.sh
gtest mpich_unit "$B/tests/unit_tests"
gtest mpich_mpi_np2 mpiexec.mpich -n 2 "$B/tests/mpi_tests"
gtest mpich_mpi_np4 mpiexec.mpich -n 4 "$B/tests/mpi_tests"
shell tests/mpich/e2e_test.sh
print_skips
if ((${#failures[@]})); then printf 'FAILED: %s\n' "${failures[@]}"; fi
echo "== MPICH stage: $((SECONDS - t0)) s; logs: $LOG"
echo "mpich: $passed passed, $failed failed, $skipped skipped"
((failed == 0))
