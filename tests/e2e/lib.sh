# lib.sh — helpers for the end-to-end tests: each `ok`/`not_ok` line is one test case counted by
# tests/run_tests.sh. Every launch runs under `timeout` (the 2-core machine can stall).
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$REPO/mnist_ddp"
source "$REPO/tests/mpi_env.sh"
TMP="$(mktemp -d /tmp/mnist_ddp_e2e.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT

pass() { echo "ok - $1"; }
fail() { echo "not ok - $1"; shift; for l in "$@"; do echo "    $l"; done; }

# run NAME TIMEOUT CMD... : runs CMD, keeps stdout/stderr in $OUT/$ERR, exit code in $RC, seconds in $SECS
run() {
  local name="$1" limit="$2"; shift 2
  OUT="$TMP/$name.out"; ERR="$TMP/$name.err"
  local t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >"$OUT" 2>"$ERR"
  RC=$?
  SECS=$(echo "$(date +%s.%N) - $t0" | bc)
}

show() { echo "--- stdout"; tail -n 15 "$OUT"; echo "--- stderr"; tail -n 15 "$ERR"; }
