# suite_lib.sh — what tests/run_tests.sh (`make test`) and tests/run_sanitized.sh
# (`make test-sanitize`) share: run one GoogleTest binary or one end-to-end script, count its
# cases, collect skip reasons and failures. Sourced; the caller sets LOG (a directory).
passed=0
failed=0
skipped=0
failures=()

# gtest SUITE CMD...: counts GoogleTest's per-test lines.
gtest() {
  local name="$1"; shift
  echo "== $name: $*"
  local t0=$SECONDS
  timeout --kill-after=10 "${SUITE_TIMEOUT:-300}" "$@" --gtest_color=no >"$LOG/$name.log" 2>&1
  local rc=$?
  local ok bad
  ok=$(grep -c "^\[       OK \]" "$LOG/$name.log")
  bad=$(grep -c "^\[  FAILED  \] .*(.*ms)" "$LOG/$name.log")
  skipped=$((skipped + $(grep -c "^\[  SKIPPED \] .*(.*ms)" "$LOG/$name.log")))
  # GoogleTest prints a skip's reason on the line after "file:line: Skipped".
  grep -A1 ": Skipped$" "$LOG/$name.log" | grep -v -- "^--$" | grep -v ": Skipped$" >>"$LOG/skip-reasons.txt"
  grep -E "^\[  (SKIPPED|FAILED) +\] .*\(" "$LOG/$name.log" | sed 's/^/   /'
  grep -E "^max " "$LOG/$name.log" | sed 's/^/   /'
  passed=$((passed + ok)); failed=$((failed + bad))
  if [[ $rc -ne 0 && $bad -eq 0 ]]; then
    # The MPI suite's ranks other than 0 print only their failures, each line tagged "[rank N]":
    # the summary at the end names the tests that failed there.
    local on_ranks
    on_ranks=$(grep -E "^\[rank [0-9]+\] \[  FAILED  \] " "$LOG/$name.log" | sed 's/\[  FAILED  \] //' |
      sort -u | head -8 | paste -sd, -)
    failed=$((failed + 1)); failures+=("$name exited $rc${on_ranks:+ (failed on $on_ranks)}")
    tail -30 "$LOG/$name.log"
    grep -E "^\[rank [0-9]+\] " "$LOG/$name.log" | head -60
  fi
  ((bad > 0)) && failures+=("$name: $bad failed") && grep -B5 -A15 "Failure" "$LOG/$name.log" | head -60
  echo "   $ok passed, $bad failed in $((SECONDS - t0)) s"
}

# shell TEST_SCRIPT: counts ok / not ok lines.
shell() {
  local name; name=$(basename "$1" .sh)
  echo "== $name"
  local t0=$SECONDS
  bash "$1" >"$LOG/$name.log" 2>&1
  local rc=$? ok bad
  # A script that paused CI's background build (pause_background, tests/e2e/lib.sh) and died
  # before resuming it must not leave it stopped: CI would wait for it forever.
  local g
  for g in ${MNIST_DDP_PAUSE_PGID:-}; do kill -CONT -- "-$g" 2>/dev/null; done
  ok=$(grep -c "^ok - " "$LOG/$name.log")
  bad=$(grep -c "^not ok - " "$LOG/$name.log")
  skip=$(grep -c "^skip - " "$LOG/$name.log")
  grep "^skip - " "$LOG/$name.log" | sed 's/^skip - //' >>"$LOG/skip-reasons.txt"
  sed 's/^/   /' "$LOG/$name.log"
  echo "   ($name: $((SECONDS - t0)) s)"
  passed=$((passed + ok)); failed=$((failed + bad)); skipped=$((skipped + skip))
  if ((ok + bad + skip == 0)); then failed=$((failed + 1)); failures+=("$name ran nothing"); fi
  # A script that died half way (killed, an error that ended bash) must not count as passed.
  if [[ $rc -ne 0 ]] || ! grep -q "^end - $name$" "$LOG/$name.log"; then
    failed=$((failed + 1))
    failures+=("$name ended before its end (exit $rc, no 'end - $name' line)")
  fi
  ((bad > 0)) && failures+=("$name: $bad failed")
}

# print_skips: every skip with its reason, so a green run shows what it did not test.
print_skips() {
  if [[ -s "$LOG/skip-reasons.txt" ]]; then
    echo "skipped, by reason:"
    sort "$LOG/skip-reasons.txt" | uniq -c | sort -rn | sed 's/^/  /'
  fi
}
