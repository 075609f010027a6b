# suite_lib.sh — what every suite runner here shares: tests/run_tests.sh (`make test`),
# tests/run_sanitized.sh (`make test-sanitize`), tests/aarch64/run.sh, tests/mpich/run.sh and
# tools/gpu-suite.sh (the lent GPU machine). One rule for counting a run's cases (count_cases), one
# for when a run failed beyond them (faults: the `end - NAME` line among them), one tally of the
# suite (tally: passed, failed, skipped, failures) and one clock for a suite that has a deadline
# (suite_budget). gtest and shell run one GoogleTest binary or one end-to-end script with them and
# collect skip reasons; the caller sets LOG (a directory) for those two. Sourced.
passed=0
failed=0
skipped=0
failures=()

# count_cases KIND LOG: NP NF NS, the cases LOG says passed, failed and skipped.
#   gtest: GoogleTest's per-test lines (under mpirun, rank 0's: the MPI suite's other ranks print
#          only their failures, each line tagged "[rank N]", which these patterns leave out)
#   tap:   tests/e2e/lib.sh's ok / not ok / skip lines
count_cases() {
  case "$1" in
    gtest) NP=$(grep -c "^\[       OK \]" "$2")
           NF=$(grep -c "^\[  FAILED  \] .*(.*ms)" "$2")
           NS=$(grep -c "^\[  SKIPPED \] .*(.*ms)" "$2") ;;
    tap) NP=$(grep -c "^ok - " "$2")
         NF=$(grep -c "^not ok - " "$2")
         NS=$(grep -c "^skip - " "$2") ;;
    *) echo "count_cases: unknown kind '$1' (gtest or tap)" >&2; return 2 ;;
  esac
}

# ended LOG NAME: LOG holds "end - NAME", the line tests/e2e/lib.sh's finish prints last.
ended() { grep -q "^end - $2$" "$1"; }

# faults KIND NAME LOG RC [END]: FAULTS, why the run failed beyond the failed cases that
# count_cases found (NP NF NS, set before): each one is one failure more.
#   gtest: an exit status != 0 with no failed case (a crash, a rank that died, a timeout).
#   tap:   a script that ran nothing; one that exited != 0 or has no "end - END" line (END: NAME
#          unless given): a script that died half way (killed, an error that ended bash) must not
#          count as passed.
faults() {
  local kind="$1" name="$2" log="$3" rc="$4" end="${5:-$2}"
  FAULTS=()
  case "$kind" in
    gtest) ((rc != 0 && NF == 0)) && FAULTS+=("$name exited $rc") ;;
    tap) ((NP + NF + NS == 0)) && FAULTS+=("$name ran nothing")
         if ((rc != 0)) || ! ended "$log" "$end"; then
           FAULTS+=("$name ended before its end (exit $rc, no 'end - $end' line)")
         fi ;;
  esac
  return 0
}

# tally NAME NP NF NS [REASON...]: adds one run to the suite's counts: its cases, and one failure
# more for each REASON; failures gets each REASON, then "NAME: NF failed".
tally() {
  local name="$1" np="$2" nf="$3" ns="$4"; shift 4
  passed=$((passed + np)); failed=$((failed + nf + $#)); skipped=$((skipped + ns))
  failures+=("$@")
  ((nf > 0)) && failures+=("$name: $nf failed")
  return 0
}

# The clock of a suite with a deadline (tools/gpu-suite.sh: the lent machine allows 600 s a
# command): SUITE_LIMIT seconds from SUITE_T0 (a $SECONDS value), SUITE_RESERVE of them kept back
# for the runs still to come, so a slow run cannot crowd them out; what a run leaves unused passes
# to the next. Without SUITE_LIMIT (every other suite) a run gets its own cap, as before.
# suite_budget CAP: SUITE_BUDGET, CAP or what is left if less; false when fewer than 10 s are left
# (a run that short would only time out), with SUITE_BUDGET_WHY saying so.
suite_budget() {
  SUITE_BUDGET="$1" SUITE_BUDGET_WHY=""
  [[ -n "${SUITE_LIMIT:-}" ]] || return 0
  local reserve="${SUITE_RESERVE:-0}" left
  left=$((SUITE_LIMIT - (SECONDS - ${SUITE_T0:-0}) - reserve))
  if ((left < 10)); then
    SUITE_BUDGET_WHY="the stage's ${SUITE_LIMIT} s are used up"
    ((reserve > 0)) &&
      SUITE_BUDGET_WHY="$((left + reserve)) s left of the stage's ${SUITE_LIMIT}, ${reserve} kept for the steps after it"
    return 1
  fi
  ((SUITE_BUDGET > left)) && SUITE_BUDGET=$left
  return 0
}

# gtest SUITE CMD...: counts GoogleTest's per-test lines.
gtest() {
  local name="$1"; shift
  echo "== $name: $*"
  local t0=$SECONDS
  if ! suite_budget "${SUITE_TIMEOUT:-300}"; then
    echo "   not run: $SUITE_BUDGET_WHY"
    tally "$name" 0 0 0 "$name not run: $SUITE_BUDGET_WHY"
    return 0
  fi
  timeout --kill-after=10 "$SUITE_BUDGET" "$@" --gtest_color=no >"$LOG/$name.log" 2>&1
  local rc=$? NP NF NS
  local -a FAULTS=()
  count_cases gtest "$LOG/$name.log"
  # GoogleTest prints a skip's reason on the line after "file:line: Skipped".
  grep -A1 ": Skipped$" "$LOG/$name.log" | grep -v -- "^--$" | grep -v ": Skipped$" >>"$LOG/skip-reasons.txt"
  grep -E "^\[  (SKIPPED|FAILED) +\] .*\(" "$LOG/$name.log" | sed 's/^/   /'
  grep -E "^max " "$LOG/$name.log" | sed 's/^/   /'
  faults gtest "$name" "$LOG/$name.log" "$rc"
  if ((${#FAULTS[@]})); then
    # The MPI suite's ranks other than 0 print only their failures, each line tagged "[rank N]":
    # the summary at the end names the tests that failed there.
    local on_ranks
    on_ranks=$(grep -E "^\[rank [0-9]+\] \[  FAILED  \] " "$LOG/$name.log" | sed 's/\[  FAILED  \] //' |
      sort -u | head -8 | paste -sd, -)
    FAULTS[0]+="${on_ranks:+ (failed on $on_ranks)}"
    tail -30 "$LOG/$name.log"
    grep -E "^\[rank [0-9]+\] " "$LOG/$name.log" | head -60
  fi
  tally "$name" "$NP" "$NF" "$NS" "${FAULTS[@]}"
  ((NF > 0)) && grep -B5 -A15 "Failure" "$LOG/$name.log" | head -60
  echo "   $NP passed, $NF failed in $((SECONDS - t0)) s"
}

# shell TEST_SCRIPT: counts ok / not ok lines; the script must end with its "end - NAME" line.
shell() {
  local name; name=$(basename "$1" .sh)
  echo "== $name"
  local t0=$SECONDS
  bash "$1" >"$LOG/$name.log" 2>&1
  local rc=$? NP NF NS
  local -a FAULTS=()
  # A script that paused CI's background build (pause_background, tests/e2e/lib.sh) and died
  # before resuming it must not leave it stopped: CI would wait for it forever.
  local g
  for g in ${MNIST_DDP_PAUSE_PGID:-}; do kill -CONT -- "-$g" 2>/dev/null; done
  count_cases tap "$LOG/$name.log"
  grep "^skip - " "$LOG/$name.log" | sed 's/^skip - //' >>"$LOG/skip-reasons.txt"
  sed 's/^/   /' "$LOG/$name.log"
  echo "   ($name: $((SECONDS - t0)) s)"
  faults tap "$name" "$LOG/$name.log" "$rc"
  tally "$name" "$NP" "$NF" "$NS" "${FAULTS[@]}"
}

# print_skips: every skip with its reason, so a green run shows what it did not test.
print_skips() {
  if [[ -s "$LOG/skip-reasons.txt" ]]; then
    echo "skipped, by reason:"
    sort "$LOG/skip-reasons.txt" | uniq -c | sort -rn | sed 's/^/  /'
  fi
}
