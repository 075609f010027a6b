#!/usr/bin/env bash
# threads_test.sh — the code paths with more than one thread, run end to end on the binary that
# tests/run_sanitized.sh points MNIST_DDP_BIN at (the ThreadSanitizer build): the communication
# thread of --overlap-engine thread, the collective watchdog's thread, and the signal path
# (SIGTERM to one rank -> stop flag -> agreed step boundary -> checkpoint). Each case also checks
# its result, so a race that changes numbers fails here even where TSan stays quiet.
source "$(dirname "$0")/../e2e/lib.sh"
DATA="$(small_data)"  # the 6,000-image subset: 40 steps fit in its epoch (47 at batch 64)
COMMON=(--device cpu --data "$DATA" --epochs 1 --progress off --overlap-engine thread
  --collective-timeout 120 --batch-size 64 --eval-batch-size 1000)
same_state() {
  h5diff -q "$1" "$2" /model /model >/dev/null && h5diff -q "$1" "$2" /optimizer /optimizer >/dev/null
}

run full 600 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 40 --checkpoint-dir "$TMP/A" --log-dir "$TMP/A/log"
if [[ $RC -eq 0 && -f "$TMP/A/ckpt-00000040.h5" ]]; then
  pass "thread_engine_run (40 steps, 2 ranks, ${SECS%???????} s)"
else
  fail "thread_engine_run rc=$RC" "$(show)"
fi

# SIGTERM to one rank once step 10 is logged: every rank stops at one agreed step boundary and
# writes a checkpoint; the resumed run ends bitwise equal to the uninterrupted one.
(timeout 600 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 40 --log-every 1 --checkpoint-dir "$TMP/B" \
  --log-dir "$TMP/B/log" >"$TMP/sig.out" 2>&1; echo $? >"$TMP/sig.rc") &
for _ in $(seq 600); do grep -q '"step":10' "$TMP/B/log/metrics.jsonl" 2>/dev/null && break; sleep 0.2; done
pid=$(ps -eo pid=,comm=,args= | grep -F -- "--checkpoint-dir $TMP/B" | awk '$2 == "mnist_ddp" { print $1 }' | tail -1)
kill -TERM "$pid" 2>/dev/null
wait
ck=$(ls "$TMP/B"/ckpt-*.h5 2>/dev/null | tail -1)
if [[ "$(cat "$TMP/sig.rc")" != 0 ]] && grep -q "SIGTERM received: stopping at step" "$TMP/sig.out" && [[ -n "$ck" ]]; then
  pass "sigterm_to_one_rank_stops_at_a_step_boundary ($(basename "$ck"))"
else
  fail "sigterm_to_one_rank rc=$(cat "$TMP/sig.rc") ck=$ck pid=$pid" "$(tail -20 "$TMP/sig.out")"
fi
run resume 600 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 40 --resume auto --checkpoint-dir "$TMP/B" --log-dir "$TMP/B/log"
if [[ $RC -eq 0 ]] && same_state "$TMP/A/ckpt-00000040.h5" "$TMP/B/ckpt-00000040.h5"; then
  pass "resume_after_sigterm_is_bitwise_identical"
else
  fail "resume_after_sigterm_is_bitwise_identical rc=$RC" "$(show)"
fi

# A stuck rank: the watchdog thread of its peer names the collective and aborts the job.
run hang 300 mpirun -np 2 "$BIN" "${COMMON[@]}" --debug-hang-rank 1 --collective-timeout 5 \
  --checkpoint-dir "$TMP/H" --log-dir "$TMP/H/log"
if [[ $RC -ne 0 ]] && grep -q "has not completed after .* (--collective-timeout 5)" "$ERR" && holds "$SECS < 240"; then
  pass "stuck_rank_named_by_the_watchdog_thread (exit $RC in ${SECS%???????} s)"
else
  fail "stuck_rank_named_by_the_watchdog_thread rc=$RC secs=$SECS" "$(show)"
fi
finish
