#!/usr/bin/env bash
# failure_test.sh — a failing rank never hangs the job (under mpirun; tests/slurm/ covers srun):
# a rank stuck before a collective (--debug-hang-rank) is named by the watchdog of its peers
# within --collective-timeout, which aborts everything; a rank that exits with an error ends the
# job at once; --debug-collectives finds no mismatch on a real run; nothing is left running; the
# randomised fault harness (tests/chaos/) refuses counts it would misread.
source "$(dirname "$0")/lib.sh"
# The 6,000 / 1,000-image subset: these runs check exits, messages and dumps, not accuracy.
DATA="$(small_data)"
COMMON=(--device cpu --data "$DATA" --epochs 1 --max-steps 20 --progress off)
leftovers() { ps -eo stat=,args= | awk -v m="$1" '$1 !~ /^Z/ && index($0, m) && index($0, "mnist_ddp")' | grep -v awk; }

run hang 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --debug-hang-rank 1 --collective-timeout 3 --log-dir "$TMP/h" --checkpoint-dir "$TMP/hc"
sleep 1
if [[ $RC -ne 0 ]] && awk -v s="$SECS" 'BEGIN { exit !(s < 20) }' &&
   grep -q "rank 0 (host [^)]*): collective #[0-9]* (.*) has not completed after 3.[0-9] s (--collective-timeout 3); the last one completed on this rank was #[0-9]*" "$ERR" &&
   [[ -z "$(leftovers "$TMP/h")" ]]; then
  pass "stuck_rank_named_by_watchdog_and_job_aborted (exit $RC in ${SECS%.*} s)"
else
  fail "stuck_rank rc=$RC secs=$SECS left=$(leftovers "$TMP/h")" "$(show)"
fi

run exit_rank 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --debug-exit-rank 1 --collective-timeout 30 --log-dir "$TMP/e" --checkpoint-dir "$TMP/ec"
sleep 1
if [[ $RC -ne 0 ]] && awk -v s="$SECS" 'BEGIN { exit !(s < 15) }' && grep -q "rank 1 exits with status 1" "$ERR" &&
   [[ -z "$(leftovers "$TMP/e")" ]]; then
  pass "rank_exiting_with_error_ends_the_job (exit $RC in ${SECS%.*} s, before the 30 s watchdog)"
else
  fail "exit_rank rc=$RC secs=$SECS" "$(show)"
fi

run fingerprints 300 mpirun -np 2 "$BIN" "${COMMON[@]}" --debug-collectives --log-dir "$TMP/f" --checkpoint-dir "$TMP/fc"
if [[ $RC -eq 0 ]] && grep -q "^done: 20 steps" "$OUT"; then
  pass "debug_collectives_agree_on_a_real_run"
else
  fail "debug_collectives rc=$RC" "$(show)"
fi

# A run that diverges: 10 good steps with checkpoints every 2 (--keep 2), then resumed at a
# learning rate that blows the weights up. It stops with exit 5 naming the step and the tensor,
# and never writes a checkpoint holding NaN/inf (which --keep would have rotated the good ones
# away for): the good ones are still there, finite, and evaluate.
DV=(--device cpu --data "$DATA" --epochs 1 --progress off --log-every 2 --checkpoint-every 2 --keep 2 --log-dir "$TMP/dv" --checkpoint-dir "$TMP/dv")
run diverge_good 300 mpirun -np 2 "$BIN" "${DV[@]}" --max-steps 10
run diverge 300 mpirun -np 2 "$BIN" "${DV[@]}" --max-steps 40 --resume auto --lr 1e38
left=$(ls "$TMP/dv"/ckpt-*.h5 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')
finite=$(/usr/bin/python3 -c "
import sys, h5py, numpy as np
bad = [p + ':' + n for p in sys.argv[1:] for n, d in h5py.File(p, 'r')['model'].items()
       if d.dtype.kind == 'f' and not np.isfinite(d[()]).all()]
print('all finite' if not bad else 'NON-FINITE ' + ' '.join(bad))" "$TMP"/dv/ckpt-*.h5 2>&1)
if [[ $RC -eq 5 ]] && [[ $(grep -c "mnist_ddp: error: training diverged by step 12 (lr 1e+38): refusing to write .*ckpt-00000012.h5: /model/.* values non-finite" "$ERR") == 1 ]] &&
   [[ "$left" == "ckpt-00000008.h5 ckpt-00000010.h5 " && "$finite" == "all finite" ]]; then
  run diverge_eval 120 "$BIN" --device cpu --data "$DATA" --eval-only --resume auto --checkpoint-dir "$TMP/dv" --progress off --log-dir "$TMP/dve"
  if [[ $RC -eq 0 ]] && grep -q "^eval-only: step 10 " "$OUT"; then
    pass "diverged_run_exits_5_and_writes_no_non_finite_checkpoint (left: $left)"
  else
    fail "diverged_run: the last good checkpoint does not evaluate rc=$RC" "$(show)"
  fi
else
  fail "diverged_run rc=$RC ($finite; left: $left)" "$(show)"
fi

# A run that diverges between checkpoints: the loss check at every --log-every window stops it
# (exit 5, naming the step and the loss) before any checkpoint could be written.
run diverge_loss 300 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --epochs 1 --progress off --log-every 1 --checkpoint-every 1000 --max-steps 30 --lr 1e20 --log-dir "$TMP/dl" --checkpoint-dir "$TMP/dl"
line=$(grep -m1 -oE "training diverged at step [0-9]+: the mean loss of the last [0-9]+ images is -?(nan|inf)" "$ERR")
if [[ $RC -eq 5 && -n "$line" ]] && [[ $(grep -c "mnist_ddp: error: training diverged at step" "$ERR") == 1 ]] &&
   ! ls "$TMP"/dl/ckpt-*.h5 >/dev/null 2>&1; then
  pass "diverged_loss_stops_at_its_window_with_no_checkpoint ($line)"
else
  fail "diverged_loss rc=$RC (want exit 5, one 'training diverged at step N: the mean loss ...' error, no checkpoint)" "$(show)"
fi
# The randomised fault harness (tests/chaos/, CI's last stage) refuses counts it would misread,
# before it trains anything: "08" (bash arithmetic reads a leading 0 as octal) and no minimum run.
run chaos_bad_runs 30 env CHAOS_RUNS=08 bash "$REPO/tests/chaos/chaos_test.sh"
chaos_runs=$RC; err_runs=$(cat "$ERR")
run chaos_bad_min 30 env CHAOS_MIN_RUNS=0 bash "$REPO/tests/chaos/chaos_test.sh"
if [[ $chaos_runs -eq 2 && "$err_runs" == *"without leading zeros (got '08')"* && $RC -eq 2 ]] &&
   grep -q "CHAOS_MIN_RUNS must be at least 1 (got 0)" "$ERR" && ! grep -q "chaos seed" "$OUT"; then
  pass "chaos_harness_refuses_bad_counts"
else
  fail "chaos harness: CHAOS_RUNS=08 rc=$chaos_runs, CHAOS_MIN_RUNS=0 rc=$RC (want 2 and 2)" "$err_runs" "$(show)"
fi
finish
