#!/usr/bin/env bash
# run_tests.sh [LAYERS] — the whole suite (`make test`), or some layers of it (`make test-unit`,
# `test-mpi`, `test-e2e`, `test-slurm`, `test-numeric`, each taking FILTER=): GoogleTest unit tests, the MPI tests
# under mpirun -np 2 and -np 4 --oversubscribe, the end-to-end shell tests, the local Slurm. Prints each failure,
# every skip's reason, and ends with "N passed, M failed, K skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/mpi_env.sh
LOG="$(mktemp -d /tmp/mnist_ddp_tests.XXXXXX)"
# When the build was done and the tests began (CI's stage lines carry the same clock).
echo "== tests begin at $(date +%T)"
source tests/suite_lib.sh

# LAYERS (argument, default all): unit mpi e2e slurm. FILTER: a GoogleTest filter for the unit
# and MPI suites, a name pattern (grep -E) for the end-to-end and Slurm scripts.
# numeric: the unit and MPI suites and the end-to-end scripts that compare numbers with an oracle
# or another implementation (NUMERIC_E2E), which `make test-numeric` reruns on other kernels.
LAYERS="${1:-all}"
[[ "$LAYERS" == all ]] && LAYERS="unit mpi e2e slurm"
[[ "$LAYERS" == numeric ]] && LAYERS="unit mpi numeric_e2e"
NUMERIC_E2E="accumulate_test amp_cpu_test data_parallel_test model_io_test checkpoint_test"
GFILTER=()
[[ -n "${FILTER:-}" ]] && GFILTER=(--gtest_filter="$FILTER")
picked() { [[ -z "${FILTER:-}" ]] || grep -qE -- "$FILTER" <<<"$(basename "$1" .sh)"; }
for layer in $LAYERS; do
  case "$layer" in
    unit) gtest unit build/tests/unit_tests "${GFILTER[@]}" ;;
    mpi)
      gtest mpi_np2 mpirun -np 2 build/tests/mpi_tests "${GFILTER[@]}"
      gtest mpi_np4 mpirun -np 4 --oversubscribe build/tests/mpi_tests "${GFILTER[@]}"
      ;;
    e2e) for t in tests/e2e/*_test.sh; do picked "$t" && shell "$t"; done ;;
    numeric_e2e) for t in $NUMERIC_E2E; do picked "$t" && shell "tests/e2e/$t.sh"; done ;;
    # A real two-node Slurm (root only: it starts munged, slurmctld and slurmd; skips otherwise).
    slurm) picked tests/slurm/slurm_test.sh && shell tests/slurm/slurm_test.sh ;;
    *) echo "run_tests.sh: unknown layer '$layer' (unit, mpi, e2e, slurm, numeric, all)" >&2; exit 2 ;;
  esac
done
echo
# Every skip is reported with its reason, so a green run shows what it did not test. Where a GPU is
# required (MNIST_DDP_REQUIRE_GPU=1: tests/mpi_env.sh sets it where nvidia-smi lists a GPU), a skip
# for want of a GPU or of the CUDA backend fails the suite.
print_skips
if [[ "${MNIST_DDP_REQUIRE_GPU:-0}" == 1 ]] && [[ -s "$LOG/skip-reasons.txt" ]] &&
   grep -qiE "no usable GPU|no GPU|built without CUDA" "$LOG/skip-reasons.txt"; then
  failed=$((failed + 1))
  failures+=("GPU tests skipped although MNIST_DDP_REQUIRE_GPU=1")
fi
if ((${#failures[@]})); then printf 'FAILED: %s\n' "${failures[@]}"; fi
echo "logs: $LOG"
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
