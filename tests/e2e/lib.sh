# lib.sh — helpers for the end-to-end tests: each `ok`/`not_ok` line is one test case counted by
# tests/run_tests.sh. Every launch runs under `timeout` (the 2-core machine can stall). No `bc`:
# the GPU machine's image lacks it, so arithmetic on decimals goes through awk.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# MNIST_DDP_BIN: the binary under test (tests/run_sanitized.sh points it at a sanitizer build).
BIN="${MNIST_DDP_BIN:-$REPO/mnist_ddp}"
source "$REPO/tests/mpi_env.sh"
# MNIST_DDP_E2E_KEEP=DIR keeps each script's outputs under DIR (tools/gpu-suite.sh archives
# them); otherwise they live in a temporary directory removed at exit.
if [[ -n "${MNIST_DDP_E2E_KEEP:-}" ]]; then
  mkdir -p "$MNIST_DDP_E2E_KEEP"
  TMP="$(mktemp -d "$MNIST_DDP_E2E_KEEP/$(basename "$0" .sh).XXXXXX")"
else
  TMP="$(mktemp -d /tmp/mnist_ddp_e2e.XXXXXX)"
  trap 'rm -rf "$TMP"' EXIT
fi

# Each case line ends with the seconds since the previous case line (or the script's start), so a
# slow case shows in CI's log: "ok - name (details) [12 s]".
CASE_T0=$SECONDS
case_secs() { CASE_SECS="[$((SECONDS - CASE_T0)) s]"; CASE_T0=$SECONDS; }
pass() { case_secs; echo "ok - $1 $CASE_SECS"; }
# The last thing a test script does (also instead of an early `exit 0`): says it reached its end,
# which tests/run_tests.sh requires, so a script that dies half way never counts as passed.
finish() { echo "end - $(basename "$0" .sh)"; exit 0; }
fail() { case_secs; echo "not ok - $1 $CASE_SECS"; shift; for l in "$@"; do echo "    $l"; done; }

# small_data: prints the path of a 6,000 / 1,000-image subset of data/dataset (data/subset.py),
# made once per script: 30 steps an epoch on 2 ranks x 100, for the tests that check steps,
# epochs and files rather than accuracy.
small_data() {
  [[ -f "$TMP/small/DATASET" ]] || python3 "$REPO/data/subset.py" "$REPO/data/dataset" "$TMP/small" 6000 1000 >&2
  echo "$TMP/small"
}

# elapsed T0: seconds since T0 (a `date +%s.%N` value), with 9 decimals as bc printed them.
elapsed() { awk -v t0="$1" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.9f\n", t1 - t0 }'; }
# holds 'EXPR': true when the numeric comparison holds, e.g. holds "$SECS < 30" (awk syntax:
# + - * / ^ < <= == >= > && ||). False, never an error, when a value is missing.
holds() { awk "BEGIN { exit !($*) }" </dev/null 2>/dev/null; }

# run NAME TIMEOUT CMD... : runs CMD, keeps stdout/stderr in $OUT/$ERR, exit code in $RC, seconds in $SECS
run() {
  local name="$1" limit="$2"; shift 2
  OUT="$TMP/$name.out"; ERR="$TMP/$name.err"
  local t0
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >"$OUT" 2>"$ERR"
  RC=$?
  SECS=$(elapsed "$t0")
  # MNIST_DDP_TEST_TIMES=FILE: one line per launch (script, name, seconds), to find where a
  # suite's time goes (CI keeps under 30 minutes on 2 cores).
  [[ -n "${MNIST_DDP_TEST_TIMES:-}" ]] && echo "$(basename "$0" .sh) $name $SECS" >>"$MNIST_DDP_TEST_TIMES"
  return 0
}

# pause_background / resume_background: around what scores ranks' or nodes' compute against each
# other (straggler detection, check_cluster), CI's background build is stopped (.ci/run names its
# process group in MNIST_DDP_PAUSE_PGID; tests/suite_lib.sh resumes it after every script in any
# case): a build waiting for every idle moment delays ranks' wake-ups by milliseconds, and in local
# CI runs made a healthy run name a straggler and a healthy node score 0.78.
pause_background() {
  local g
  [[ -n "${MNIST_DDP_PAUSE_PGID:-}" ]] || return 0
  for g in $MNIST_DDP_PAUSE_PGID; do kill -STOP -- "-$g" 2>/dev/null; done
  echo "(CI's background builds, process group(s) $MNIST_DDP_PAUSE_PGID, paused: $1)"
  return 0
}
resume_background() {
  local g
  for g in ${MNIST_DDP_PAUSE_PGID:-}; do kill -CONT -- "-$g" 2>/dev/null; done
  return 0
}

# blas_core: the OpenBLAS kernel family this process runs (OPENBLAS_CORETYPE included);
# other_blas_core: a second family this CPU can execute whose float32 rounding differs
# (tests/kernel_variant.sh --blas), for the oracle tests that measure float32's rounding spread
# inside the test (tests/e2e/accumulate_test.sh).
blas_core() { OPENBLAS_VERBOSE=2 "$BIN" --version 2>&1 | sed -n 's/^Core: //p' | head -1; }
other_blas_core() { MNIST_DDP_BIN="$BIN" "$REPO/tests/kernel_variant.sh" --blas; }

# py_has PYTHON MODULE...: true when PYTHON can find every MODULE, without importing them
# (importing torch costs ~2 s a probe; a module found but broken fails the test that uses it).
py_has() {
  local py="$1"; shift
  "$py" -c 'import importlib.util as u, sys; sys.exit(0 if all(u.find_spec(m) for m in sys.argv[1:]) else 1)' "$@" 2>/dev/null
}

show() { echo "--- stdout"; tail -n 15 "$OUT"; echo "--- stderr"; tail -n 15 "$ERR"; }
