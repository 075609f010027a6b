#!/usr/bin/env bash
# run_tests.sh — the whole suite (`make test`): GoogleTest unit tests, the MPI tests under
# mpirun -np 2 and -np 4 --oversubscribe, and the end-to-end shell tests. Prints each failure,
# every skip's reason, and ends with "N passed, M failed, K skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/mpi_env.sh
passed=0
failed=0
skipped=0
failures=()
LOG="$(mktemp -d /tmp/mnist_ddp_tests.XXXXXX)"

# gtest SUITE CMD...: counts GoogleTest's per-test lines.
gtest() {
  local name="$1"; shift
  echo "== $name: $*"
  timeout --kill-after=10 300 "$@" --gtest_color=no >"$LOG/$name.log" 2>&1
  local rc=$?
  local ok bad
  ok=$(grep -c "^\[       OK \]" "$LOG/$name.log")
  bad=$(grep -c "^\[  FAILED  \] .*(.*ms)" "$LOG/$name.log")
  skipped=$((skipped + $(grep -c "^\[  SKIPPED \] .*(.*ms)" "$LOG/$name.log")))
  # GoogleTest prints a skip's reason on the line after "file:line: Skipped".
  grep -A1 ": Skipped$" "$LOG/$name.log" | grep -v -- "^--$" | grep -v ": Skipped$" >>"$LOG/skip-reasons.txt"
  grep -E "^\[  (SKIPPED|FAILED) \] .*\(" "$LOG/$name.log" | sed 's/^/   /'
  grep -E "^max " "$LOG/$name.log" | sed 's/^/   /'
  passed=$((passed + ok)); failed=$((failed + bad))
  if [[ $rc -ne 0 && $bad -eq 0 ]]; then
    failed=$((failed + 1)); failures+=("$name exited $rc"); tail -30 "$LOG/$name.log"
  fi
  ((bad > 0)) && failures+=("$name: $bad failed") && grep -B5 -A15 "Failure" "$LOG/$name.log" | head -60
  echo "   $ok passed, $bad failed"
}

# shell TEST_SCRIPT: counts ok / not ok lines.
shell() {
  local name; name=$(basename "$1" .sh)
  echo "== $name"
  bash "$1" >"$LOG/$name.log" 2>&1
  local rc=$? ok bad
  ok=$(grep -c "^ok - " "$LOG/$name.log")
  bad=$(grep -c "^not ok - " "$LOG/$name.log")
  skip=$(grep -c "^skip - " "$LOG/$name.log")
  grep "^skip - " "$LOG/$name.log" | sed 's/^skip - //' >>"$LOG/skip-reasons.txt"
  sed 's/^/   /' "$LOG/$name.log"
  passed=$((passed + ok)); failed=$((failed + bad)); skipped=$((skipped + skip))
  if ((ok + bad + skip == 0)); then failed=$((failed + 1)); failures+=("$name ran nothing"); fi
  # A script that died half way (killed, an error that ended bash) must not count as passed.
  if [[ $rc -ne 0 ]] || ! grep -q "^end - $name$" "$LOG/$name.log"; then
    failed=$((failed + 1))
    failures+=("$name ended before its end (exit $rc, no 'end - $name' line)")
  fi
  ((bad > 0)) && failures+=("$name: $bad failed")
}

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
if [[ -s "$LOG/skip-reasons.txt" ]]; then
  echo "skipped, by reason:"
  sort "$LOG/skip-reasons.txt" | uniq -c | sort -rn | sed 's/^/  /'
  if [[ "${MNIST_DDP_REQUIRE_GPU:-0}" == 1 ]] &&
     grep -qiE "no usable GPU|no GPU|built without CUDA" "$LOG/skip-reasons.txt"; then
    failed=$((failed + 1))
    failures+=("GPU tests skipped although MNIST_DDP_REQUIRE_GPU=1")
  fi
fi
if ((${#failures[@]})); then printf 'FAILED: %s\n' "${failures[@]}"; fi
echo "logs: $LOG"
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
