#!/usr/bin/env bash
# flight_test.sh — the flight recorder and its analyzer under mpirun (tests/slurm/ covers srun):
# each failure leaves flight-rank<R>.json dumps in --log-dir from which tools/flight_analyze names
# the rank to look at: a stuck rank (--debug-hang-rank), a rank that exits (--debug-exit-rank), a
# desync (--debug-desync-rank); the dump signal on a healthy run dumps every rank, the run goes
# on to the end, and the verdict is "no problem found"; without a readable dump the analyzer
# says so and exits 2.
source "$(dirname "$0")/lib.sh"
# The 6,000 / 1,000-image subset: these runs check exits, messages and dumps, not accuracy.
DATA="$(small_data)"
COMMON=(--device cpu --data "$DATA" --epochs 1 --progress off)
ANALYZE="$REPO/tools/flight_analyze"
# analyze NAME DIR: the analyzer's output in $TMP/NAME.verdict, its exit code in $ARC.
analyze() {
  "$ANALYZE" "$2" >"$TMP/$1.verdict" 2>&1
  ARC=$?
}
VERDICT() { grep "^verdict: " "$TMP/$1.verdict"; }

# 1. A stuck rank: rank 0's watchdog fires in the collective rank 1 never enters, rank 0 dumps
#    before aborting the job.
run hang 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 20 --debug-hang-rank 1 --collective-timeout 3 --log-dir "$TMP/h" --checkpoint-dir "$TMP/hc"
analyze hang "$TMP/h"
if [[ $RC -ne 0 && $ARC -eq 1 && -f "$TMP/h/flight-rank0.json" ]] &&
   grep -q '"reason": "watchdog: a collective exceeded --collective-timeout"' "$TMP/h/flight-rank0.json" &&
   VERDICT hang | grep -q "^verdict: HANG on communicator 'world': rank 0 (host [^)]*) waits in collective #[0-9]* [a-z]* [0-9]* x f32 (step 3) for [0-9.]* s, which rank 1 (host [^)]*) never entered .*Look at rank 1 (host"; then
  pass "stuck_rank_named_by_the_analyzer ($(VERDICT hang | cut -c1-120)...)"
else
  fail "stuck_rank rc=$RC analyzer=$ARC" "$(show)" "$(cat "$TMP/hang.verdict")"
fi

# 2. A rank that exits: it leaves no dump; its peer is killed by mpirun (SIGTERM: it dumps) or
#    its watchdog fires; either way the analyzer names rank 1.
run exit_rank 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 20 --debug-exit-rank 1 --collective-timeout 5 --log-dir "$TMP/e" --checkpoint-dir "$TMP/ec"
analyze exit_rank "$TMP/e"
if [[ $RC -ne 0 && $ARC -eq 1 && ! -f "$TMP/e/flight-rank1.json" ]] &&
   VERDICT exit_rank | grep -q "rank 1 (host [^)]*) left no dump" &&
   VERDICT exit_rank | grep -q "Look at rank 1 (host"; then
  pass "exited_rank_named_by_the_analyzer ($(VERDICT exit_rank | cut -c1-120)...)"
else
  fail "exited_rank rc=$RC analyzer=$ARC" "$(show)" "$(cat "$TMP/exit_rank.verdict")"
fi

# 3. A desync on 3 ranks (a majority tells the odd one out): rank 1 issues an extra 2 x i32
#    all-reduce before step 3; --debug-collectives catches it on every rank, each dumps with the
#    error, the analyzer names rank 1.
run desync 120 mpirun --oversubscribe -np 3 "$BIN" "${COMMON[@]}" --max-steps 20 --debug-desync-rank 1 --debug-collectives --log-dir "$TMP/d" --checkpoint-dir "$TMP/dc"
analyze desync "$TMP/d"
if [[ $RC -ne 0 && $ARC -eq 1 && $(ls "$TMP"/d/flight-rank*.json | wc -l) -eq 3 ]] &&
   grep -q "the ranks disagree on their next collective" "$ERR" &&
   VERDICT desync | grep -q "^verdict: DESYNC on communicator 'world' at collective #[0-9]*: rank 1 issues #[0-9]* allreduce 2 x i32 (step 3), while rank 0 (and the others) issue #[0-9]* [a-z]* [0-9]* x f32 (step 3). Look at rank 1 (host"; then
  pass "desync_named_by_the_analyzer ($(VERDICT desync | cut -c1-120)...)"
else
  fail "desync rc=$RC analyzer=$ARC" "$(show)" "$(cat "$TMP/desync.verdict")"
fi

# 4. The dump signal on a healthy run: every rank dumps and keeps going; the run ends normally
#    (exit 0, every step done) and the analyzer finds no problem.
#    --batch-size 20: what is checked is the dumps and the run's end, and a step costs a fifth.
( run healthy 300 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --epochs 2 --max-steps 200 --batch-size 20 --progress off --log-every 20 --log-dir "$TMP/ok" --checkpoint-dir "$TMP/okc"
  echo "$RC" >"$TMP/healthy.rc" ) &
launcher=$!
pids=""
for _ in $(seq 1 300); do
  pids=$(pgrep -f -- "--log-dir $TMP/ok " | xargs -r ps -o pid=,comm= -p | awk '$2 == "mnist_ddp" { print $1 }' | tr '\n' ' ')
  [[ $(wc -w <<<"$pids") -eq 2 ]] && grep -q "^epoch 1 step " "$TMP/healthy.out" 2>/dev/null && break
  sleep 0.1
done
# shellcheck disable=SC2086
kill -USR2 $pids 2>/dev/null
for _ in $(seq 1 100); do
  [[ -f "$TMP/ok/flight-rank0.json" && -f "$TMP/ok/flight-rank1.json" ]] && break
  sleep 0.1
done
wait "$launcher"
RC=$(cat "$TMP/healthy.rc" 2>/dev/null || echo missing)
OUT="$TMP/healthy.out"; ERR="$TMP/healthy.err"
analyze healthy "$TMP/ok"
if [[ "$RC" == 0 && $ARC -eq 0 ]] && grep -q "^done: 200 steps" "$OUT" &&
   [[ $(grep -c '"reason": "SIGUSR2 received"' "$TMP"/ok/flight-rank*.json | awk -F: '{ s += $2 } END { print s }') -eq 2 ]] &&
   VERDICT healthy | grep -q "^verdict: no problem found (2 ranks agree"; then
  pass "dump_signal_on_a_healthy_run_dumps_every_rank_and_finds_no_problem"
else
  fail "healthy dump rc=$RC analyzer=$ARC pids='$pids'" "$(show)" "$(cat "$TMP/healthy.verdict")"
fi

# 5. The analyzer on a directory without dumps, or with only a damaged one: one clear line naming
#    it, exit 2 (beside readable dumps a damaged one is skipped and named).
mkdir -p "$TMP/empty" "$TMP/damaged" && echo '{"rank": 0, "world": 2, "com' >"$TMP/damaged/flight-rank0.json"
analyze empty "$TMP/empty"
analyze damaged "$TMP/damaged"
if [[ $ARC -eq 2 ]] && grep -q "no flight-rank<R>.json in $TMP/empty" "$TMP/empty.verdict" &&
   grep -q "no flight-rank<R>.json in $TMP/damaged can be read: $TMP/damaged/flight-rank0.json: not whole JSON" "$TMP/damaged.verdict" &&
   [[ $(wc -l <"$TMP/damaged.verdict") == 1 ]]; then
  pass "analyzer_without_a_readable_dump_says_so_and_exits_2"
else
  fail "analyzer_bad_input arc=$ARC" "$(cat "$TMP/empty.verdict" "$TMP/damaged.verdict")"
fi

# 6. Off means off: --flight-recorder 0 writes no dump, even when a desync ends the run.
run off 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 20 --debug-desync-rank 1 --debug-collectives --flight-recorder 0 --log-dir "$TMP/off" --checkpoint-dir "$TMP/offc"
if [[ $RC -ne 0 ]] && ! ls "$TMP"/off/flight-rank*.json >/dev/null 2>&1; then
  pass "flight_recorder_0_writes_no_dump"
else
  fail "off rc=$RC" "$(ls "$TMP/off")"
fi
finish
