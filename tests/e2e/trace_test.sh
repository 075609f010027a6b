#!/usr/bin/env bash
# trace_test.sh — the timeline (--trace) under mpirun: the default window, an explicit
# --trace-steps window with the fp16 hook, a run stopped by SIGTERM (its stop and its preemption
# checkpoint in the file), and the bad inputs (one clear error naming the flag, before training).
# check_trace.py holds what every trace must satisfy.
source "$(dirname "$0")/lib.sh"
DATA="$REPO/data/dataset"
COMMON=(--device cpu --data "$DATA" --epochs 1 --progress off)
CHECK="$REPO/tests/e2e/check_trace.py"
PARAM_BYTES=116136  # the ConvNet's 29,034 float parameters: one step's gradient all-reduce

# 1. The default window on 2 ranks: steps 10..59 of 80.
run default 180 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 80 --trace "$TMP/default.json" --log-dir "$TMP/dl" --checkpoint-dir "$TMP/dc"
if [[ $RC -eq 0 ]] && got=$("$CHECK" "$TMP/default.json" --ranks 2 --steps 10:60 --param-bytes $PARAM_BYTES 2>&1) &&
   grep -q "trace: $TMP/default.json (steps 10:60" "$OUT"; then
  pass "default_window_2_ranks ($got)"
else
  fail "default_window rc=$RC" "$got" "$(show)"
fi
# 1b. The default window counts from the step the run starts at. Resumed at case 1's last
#     checkpoint (step 80) up to step 150: steps 90..139 (placed from step 0 it named steps 10..59,
#     which the run never executes). After --init-weights (the model of step 80, a fresh run of 70
#     steps): steps 10..59, not from 80 (the model's step).
run resumed_window 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 150 --resume auto --trace "$TMP/resumed.json" --log-dir "$TMP/rl" --checkpoint-dir "$TMP/dc"
if [[ $RC -eq 0 ]] && grep -q "resume: step 80" "$OUT" &&
   got=$("$CHECK" "$TMP/resumed.json" --ranks 2 --steps 90:140 --param-bytes $PARAM_BYTES 2>&1) &&
   grep -q "trace: $TMP/resumed.json (steps 90:140" "$OUT"; then
  pass "default_window_after_resume_traces_executed_steps ($got)"
else
  fail "resumed_window rc=$RC" "$got" "$(show)"
fi
run init_window 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 70 --init-weights "$TMP/dc/ckpt-00000080.h5" --trace "$TMP/init.json" --log-dir "$TMP/il" --checkpoint-dir "$TMP/ic"
if [[ $RC -eq 0 ]] && grep -q "the model of step 80" "$OUT" &&
   got=$("$CHECK" "$TMP/init.json" --ranks 2 --steps 10:60 --param-bytes $PARAM_BYTES 2>&1) &&
   grep -q "trace: $TMP/init.json (steps 10:60" "$OUT"; then
  pass "default_window_after_init_weights_traces_executed_steps ($got)"
else
  fail "init_window rc=$RC" "$got" "$(show)"
fi

# 2. --trace-steps 5:8 on 3 ranks with the fp16 hook: exactly those steps, half the bytes.
run window 180 mpirun -np 3 "$BIN" "${COMMON[@]}" --max-steps 12 --compression fp16 --trace "$TMP/window.json" --trace-steps 5:8 --log-dir "$TMP/wl" --checkpoint-dir "$TMP/wc"
if [[ $RC -eq 0 ]] && got=$("$CHECK" "$TMP/window.json" --ranks 3 --steps 5:8 --param-bytes $((PARAM_BYTES / 2)) --hook fp16 2>&1); then
  pass "trace_steps_window_3_ranks_fp16 ($got)"
else
  fail "trace_steps_window rc=$RC" "$got" "$(show)"
fi

# 2b. --no-overlap: the gradient is reduced after backward in one all-reduce, on its own lane.
run no_overlap 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 12 --no-overlap --trace "$TMP/no.json" --trace-steps 5:8 --log-dir "$TMP/nl" --checkpoint-dir "$TMP/nc"
got=$(python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
comm = [(e['pid'], e['tid'], e['args']['step'], e['args']['bytes']) for e in ev if e['ph'] == 'X' and e['name'] == 'allreduce all gradients']
lanes = sorted({(e['tid'], e['args']['name']) for e in ev if e['name'] == 'thread_name' and e['tid'] > 0})
wait = {(e['pid'], e['args']['step']): e for e in ev if e['name'] == 'wait for gradients'}
inside = all(wait[(p, s)]['ts'] <= c['ts'] and c['ts'] + c['dur'] <= wait[(p, s)]['ts'] + wait[(p, s)]['dur'] + 0.5
             for c in ev if c['name'] == 'allreduce all gradients' for p, s in [(c['pid'], c['args']['step'])])
print(sorted(comm), lanes, inside)" "$TMP/no.json" 2>&1)
want="[(0, 4, 5, $PARAM_BYTES), (0, 4, 6, $PARAM_BYTES), (0, 4, 7, $PARAM_BYTES), (1, 4, 5, $PARAM_BYTES), (1, 4, 6, $PARAM_BYTES), (1, 4, 7, $PARAM_BYTES)] [(4, 'communication: all gradients')] True"
if [[ $RC -eq 0 && "$got" == "$want" ]]; then
  pass "no_overlap_one_allreduce_inside_the_wait_on_its_own_lane"
else
  fail "no_overlap rc=$RC" "got:  $got" "want: $want" "$(show)"
fi

# 3. SIGTERM to one rank: the run stops at a step boundary with a preemption checkpoint, and the
#    trace (written on the way out) has the stop and that checkpoint on every rank.
(timeout 180 mpirun -np 2 "$BIN" "${COMMON[@]}" --trace "$TMP/stop.json" --trace-steps 0:1000000 --log-dir "$TMP/sl" --checkpoint-dir "$TMP/sc" >"$TMP/stop.out" 2>&1; echo $? >"$TMP/stop.rc") &
for _ in $(seq 300); do grep -q "^step time\|step 1[0-9][0-9]\b" "$TMP/sl/mnist_train.log" 2>/dev/null && break; [[ -s "$TMP/sl/metrics.jsonl" ]] && break; sleep 0.1; done
sleep 0.5
pid=$(ps -eo pid=,comm=,args= | grep -F -- "--checkpoint-dir $TMP/sc" | awk '$2 == "mnist_ddp" { print $1 }' | tail -1)
kill -TERM "$pid"
wait
stops=$(python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
stop = {e['pid'] for e in ev if e['ph'] == 'i' and e['name'] == 'stop on SIGTERM'}
ckpt = {e['pid'] for e in ev if e['ph'] == 'X' and e['name'] == 'preemption checkpoint'}
steps = max(e['args']['step'] for e in ev if e['name'] == 'step')
print(sorted(stop), sorted(ckpt), steps)" "$TMP/stop.json" 2>&1)
if [[ "$(cat "$TMP/stop.rc")" == 143 && "$stops" == "[0, 1] [0, 1] "* ]] &&
   "$CHECK" "$TMP/stop.json" --ranks 2 --steps "0:$((${stops##* } + 1))" --param-bytes $PARAM_BYTES --host-spans "preemption checkpoint" >"$TMP/stop.check"; then
  pass "sigterm_stop_and_preemption_checkpoint_in_the_trace (stopped after step ${stops##* }; every step traced)"
else
  fail "sigterm_stop rc=$(cat "$TMP/stop.rc") '$stops'" "$(cat "$TMP/stop.check")" "$(tail -5 "$TMP/stop.out")"
fi

# 4. Bad input: one clear error naming the flag, non-zero, before any training or checkpoint.
bad() {  # bad NAME PATTERN ARGS...
  local name="$1" pattern="$2"; shift 2
  run "$name" 60 mpirun -np 2 "$BIN" "${COMMON[@]}" --log-dir "$TMP/$name.l" --checkpoint-dir "$TMP/$name.c" "$@"
  # (the checkpoint directory's lock file, released, is all a refused run may leave there)
  if [[ $RC -ne 0 ]] && grep -q -- "$pattern" "$ERR" && [[ ! -e "$TMP/$name.c" || -z "$(ls -A "$TMP/$name.c" | grep -vx .mnist_ddp.lock)" ]] &&
     holds "$SECS < 30"; then
    pass "$name ($(grep -m1 -o -- "$pattern.*" "$ERR" | cut -c1-110))"
  else
    fail "$name rc=$RC secs=$SECS" "$(show)"
  fi
}
bad bad_trace_steps "--trace-steps 5: give A:B" --trace "$TMP/x.json" --trace-steps 5
bad reversed_trace_steps "--trace-steps 9:3: give A:B" --trace "$TMP/x.json" --trace-steps 9:3
bad trace_steps_without_trace "--trace-steps bounds the timeline of --trace FILE" --trace-steps 1:5
bad trace_into_missing_folder "--trace $TMP/nope/t.json: folder $TMP/nope does not exist" --trace "$TMP/nope/t.json"
bad trace_onto_a_folder "--trace $TMP: is a folder" --trace "$TMP"
# 5. The scaling projection. (a) Numbers on a made-up trace, by hand: compute 10 ms (the step, no
#    wait), backward ends at 9 ms, bucket 0 = 80 MB launched at 2 ms, bucket 1 = 100 MB at 9 ms.
#    100 GbE, N = 4: t(80 MB) = 2*3/4 * 80e6 / 12.5e9 + 2*3*10 us = 9.66 ms, ends at 11.66 ms;
#    bucket 1 waits for it (one channel): 11.66 + 12.06 = 23.72 ms, 14.72 ms after backward, so the
#    step is 24.720 ms and the efficiency 10 / 24.72 = 40.5%. Fixed global batch 200 (batch 100 x
#    2 ranks) on 4 ranks: 50 each, times halved: 1 + 9.66 = 10.66, then 10.66 + 12.06 = 22.72 ms,
#    18.22 after backward (4.5): step 23.220 ms, 200 / 23.22 ms = 8,613 images/s, efficiency
#    20 ms / 23.22 ms / 4 = 21.5%.
python3 - "$TMP/made_up.json" <<'PY'
import json, sys
ev = [{"name": "step", "ph": "X", "pid": 0, "tid": 0, "ts": 1000, "dur": 10000, "args": {"step": 7, "batch": 100}},
      {"name": "backward fc", "ph": "X", "pid": 0, "tid": 0, "ts": 1000, "dur": 9000, "args": {"step": 7}},
      {"name": "wait for gradients", "ph": "X", "pid": 0, "tid": 0, "ts": 10000, "dur": 0, "args": {"step": 7}},
      {"name": "allreduce bucket 0", "ph": "X", "pid": 0, "tid": 1, "ts": 3000, "dur": 1, "args": {"step": 7, "bucket": 0, "bytes": 80000000}},
      {"name": "allreduce bucket 1", "ph": "X", "pid": 0, "tid": 2, "ts": 10000, "dur": 1, "args": {"step": 7, "bucket": 1, "bytes": 100000000}}]
json.dump({"traceEvents": ev, "otherData": {"world_size": 2}}, open(sys.argv[1], "w"))
PY
proj=$("$REPO/tools/scaling_projection" "$TMP/made_up.json" --interconnect 100gbe --max-ranks 8 -o "" 2>&1)
row=$(grep -E "^ +4 \|" <<<"$proj" | tr -s ' ')
if [[ "$row" == " 4 | 24.720 16,181 40.5% | 50 23.220 8,613 21.5%" ]]; then
  pass "projection_numbers_by_hand (N=4 on 100 GbE:$row)"
else
  fail "projection_numbers_by_hand: '$row'" "$proj"
fi
# (b) On the real trace of case 1: a table per interconnect, a verdict each, and the PNG.
proj=$("$REPO/tools/scaling_projection" "$TMP/default.json" -o "$TMP/scaling.png" 2>&1)
if [[ $(grep -c "more ranks stop paying at N = " <<<"$proj") == 3 && $(grep -cE "^ +4096 \|" <<<"$proj") == 3 ]] &&
   [[ "$(head -c 8 "$TMP/scaling.png" | od -An -c | tr -d ' ')" == "211PNG\r\n032\n" ]]; then
  pass "projection_of_a_real_trace ($(grep -m1 "stop paying" <<<"$proj"))"
else
  fail "projection_of_a_real_trace" "$proj"
fi
# (c) Not a trace: one clear error, exit 2.
echo '{"traceEvents": []}' >"$TMP/empty.json"
"$REPO/tools/scaling_projection" "$TMP/empty.json" -o "" >"$TMP/empty.out" 2>&1
prc=$?
if [[ $prc == 2 ]] && grep -q "cannot read $TMP/empty.json: .*no traced training step.*mnist_ddp --trace FILE" "$TMP/empty.out"; then
  pass "projection_refuses_a_file_without_steps ($(cut -c1-100 "$TMP/empty.out"))"
else
  fail "projection_refuses rc=$prc" "$(cat "$TMP/empty.out")"
fi
finish
