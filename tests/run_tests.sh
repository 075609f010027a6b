#!/usr/bin/env bash
# run_tests.sh — the whole suite (`make test`): GoogleTest unit tests, the MPI tests under
# mpirun -np 2 and -np 4 --oversubscribe, and the end-to-end shell tests. Prints each failure,
# every skip's reason, and ends with "N passed, M failed, K skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/mpi_env.sh
LOG="$(mktemp -d /tmp/mnist_ddp_tests.XXXXXX)"
source tests/suite_lib.sh

gtest unit build/tests/unit_tests
gtest mpi_np2 mpirun -np 2 build/tests/mpi_tests
gtest mpi_np4 mpirun -np 4 --oversubscribe build/tests/mpi_tests
for t in tests/e2e/*_test.sh; do shell "$t"; done
# A real two-node Slurm (root only: it starts munged, slurmctld and slurmd; skips otherwise).
shell tests/slurm/slurm_test.sh

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
