#!/usr/bin/env bash
# many_jobs_test.sh — several runs and one checkpoint directory: a second run aimed at a directory
# another run holds is refused (exit 2, naming the holder) before it touches anything, and the
# first one's checkpoints all verify; a holder killed with -9 leaves nothing that stops --resume
# auto; a holder record of another host is refused while its heartbeat is fresh and taken over once
# stale; --keep never deletes (and a new run never overwrites) another run's checkpoint; and
# tools/compare_runs over finished, stopped and failed runs. CPU, the 6,000-image subset.
source "$(dirname "$0")/lib.sh"
DATA="$(small_data)"
COMMON=(--device cpu --data "$DATA" --progress off)
# mnist_ddp processes of this script, by a marker in their arguments.
pids_of() { pgrep -f -- "$1" | tr '\n' ' '; }
# wait_for FILE_GLOB SECONDS: until a file matches (a run's first checkpoint).
wait_for() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    compgen -G "$1" >/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# --- two runs, one directory ------------------------------------------------------------------
D="$TMP/shared"
mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 20 --checkpoint-every 10 --keep 2 --checkpoint-dir "$D" \
  --log-dir "$TMP/logA" >"$TMP/A.out" 2>&1 &
a_pid=$!
wait_for "$D/ckpt-*.h5" 120
before=$(cd "$D" && ls -a | sort | tr '\n' ' ')
run second 60 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --checkpoint-dir "$D" --log-dir "$TMP/logB"
second_rc=$RC second_err=$(cat "$ERR" "$OUT")
after=$(cd "$D" && ls -a | sort | tr '\n' ' ')
wait "$a_pid"
a_rc=$?
run verify 60 "$BIN" --device cpu --verify-checkpoints --checkpoint-dir "$D"
why=""
[[ $second_rc -eq 2 ]] || why+=" second-exit-$second_rc"
grep -q -- "--checkpoint-dir $D is in use: held by host $(hostname) pid [0-9]*" <<<"$second_err" || why+=" holder-not-named"
grep -q "pass another --checkpoint-dir, or wait for that run to end" <<<"$second_err" || why+=" no-fix"
[[ ! -e "$TMP/logB/metrics.jsonl" ]] || why+=" second-run-wrote-its-log"
[[ $a_rc -eq 0 ]] || why+=" first-exit-$a_rc"
grep -q "^done: 600 steps" "$TMP/A.out" || why+=" first-did-not-finish"
# Everything the first run kept is there and loads: its --keep 2 newest, nothing else.
[[ "$(ls "$D"/ckpt-*.h5 | xargs -n1 basename | tr '\n' ' ')" == "ckpt-00000590.h5 ckpt-00000600.h5 " ]] || why+=" files:$(ls "$D" | tr '\n' ',')"
grep -q "^verified 2 checkpoint(s) in $D: 2 pass, 0 fail" "$OUT" || why+=" verify:$(tail -n 1 "$OUT")"
if [[ -z $why ]]; then
  pass "second_run_on_a_held_directory_is_refused_and_the_first_keeps_every_checkpoint ($(grep -o 'held by host [^,]*' <<<"$second_err"))"
else
  fail "two_runs_one_directory:$why" "--- second" "$second_err" "--- first" "$(tail -n 5 "$TMP/A.out")" \
    "--- directory before/after the second run" "$before" "$after"
fi

# --- a holder killed with -9: --resume auto continues at once ------------------------------------
K="$TMP/killed"
mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 20 --checkpoint-every 10 --log-every 5 --checkpoint-dir "$K" \
  --log-dir "$TMP/logK" >"$TMP/K.out" 2>&1 &
k_pid=$!
wait_for "$K/ckpt-00000020.h5" 120
kill -9 $(pids_of "checkpoint-dir $K") 2>/dev/null
wait "$k_pid" 2>/dev/null
held=$(grep -o '"state":"[a-z]*"' "$K/.mnist_ddp.lock")
newest=$(ls "$K"/ckpt-*.h5 | tail -n 1)
run resume_killed 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 20 --max-steps 60 --checkpoint-dir "$K" \
  --log-dir "$TMP/logK" --resume auto
if [[ $RC -eq 0 && $held == '"state":"held"' ]] &&
   grep -q "warning: --checkpoint-dir $K: taking over the lock of host $(hostname) pid [0-9]*.*which ended without releasing it" "$ERR" &&
   grep -q "^resume: $newest" "$OUT" && grep -q "^done: 60 steps" "$OUT"; then
  pass "holder_killed_with_sigkill_then_resume_auto_works_at_once (resumed $(basename "$newest"))"
else
  fail "resume_after_kill_9 rc=$RC lock=$held newest=$newest" "$(show)"
fi

# --- a holder record of another host (a node this file system's locks do not reach) -------------
H="$TMP/elsewhere"
mkdir -p "$H"
echo '{"holder":"mnist_ddp","state":"held","host":"node-elsewhere","pid":31337,"job":"9001","started":"2026-01-01T00:00:00Z"}' >"$H/.mnist_ddp.lock"
run elsewhere_fresh 60 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --max-steps 5 --checkpoint-dir "$H" --log-dir "$TMP/logH"
fresh_rc=$RC fresh_err=$(cat "$ERR")
touch -d '10 minutes ago' "$H/.mnist_ddp.lock"
run elsewhere_stale 60 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --max-steps 5 --checkpoint-dir "$H" --log-dir "$TMP/logH"
if [[ $fresh_rc -eq 2 ]] && grep -q "held by host node-elsewhere pid 31337 (Slurm job 9001), .*heartbeat [0-9] s ago" <<<"$fresh_err" &&
   [[ $RC -eq 0 ]] && grep -q "taking over the lock of host node-elsewhere pid 31337.*heartbeat 60[0-9] s ago" "$ERR" &&
   grep -q '"state":"released"' "$H/.mnist_ddp.lock" && grep -q "\"host\":\"$(hostname)\"" "$H/.mnist_ddp.lock"; then
  pass "another_hosts_record_refused_while_fresh_taken_over_after_120_s (stale rule)"
else
  fail "another_hosts_record fresh_rc=$fresh_rc stale_rc=$RC" "$fresh_err" "$(show)"
fi

# --- lineage: --keep never deletes, and a new run never overwrites, another run's checkpoint -----
# Run A's files (steps 10, 20) copied by hand into L; run B, another lineage, resumes from its own
# step-30 checkpoint into L and writes 35..60 with --keep 1: A's two files stay, B keeps one.
run lineage_a 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --max-steps 20 --checkpoint-every 10 --keep 5 --checkpoint-dir "$TMP/LA" --log-dir "$TMP/logLA"
run lineage_b 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --max-steps 30 --seed 7 --checkpoint-dir "$TMP/LB" --log-dir "$TMP/logLB"
L="$TMP/lineage"
mkdir -p "$L" && cp "$TMP/LA/ckpt-00000010.h5" "$TMP/LA/ckpt-00000020.h5" "$L/"
sums_before=$(md5sum "$L"/ckpt-*.h5)
run lineage_fresh 60 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --max-steps 30 --checkpoint-dir "$L" --log-dir "$TMP/logLF"
fresh_rc=$RC fresh_err=$(cat "$ERR")
run lineage_keep 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 2 --max-steps 60 --seed 7 --checkpoint-every 5 --keep 1 \
  --resume "$TMP/LB/ckpt-00000030.h5" --checkpoint-dir "$L" --log-dir "$TMP/logLB"
why=""
[[ $fresh_rc -eq 2 ]] || why+=" fresh-run-exit-$fresh_rc"
grep -q "holds 2 checkpoint(s) of another run that this run (run id [0-9a-f]*, from step 0) would overwrite: ckpt-00000010.h5 (run id [0-9a-f]*), ckpt-00000020.h5" <<<"$fresh_err" || why+=" no-names-in-the-way"
[[ $RC -eq 0 ]] || why+=" keep-run-exit-$RC"
[[ "$(ls "$L"/ckpt-*.h5 | xargs -n1 basename | tr '\n' ' ')" == "ckpt-00000010.h5 ckpt-00000020.h5 ckpt-00000060.h5 " ]] || why+=" left:$(ls "$L" | tr '\n' ',')"
[[ "$(md5sum "$L"/ckpt-0000001*.h5 "$L"/ckpt-0000002*.h5)" == "$sums_before" ]] || why+=" A's-files-changed"
grep -q "checkpoints: 2 file(s) in $L belong to another run or an older mnist_ddp" "$OUT" || why+=" foreign-not-said"
if [[ -z $why ]]; then
  pass "keep_never_deletes_and_a_new_run_never_overwrites_another_runs_checkpoints (A's 10, 20 intact; B kept 60 of 35..60)"
else
  fail "lineage:$why" "$fresh_err" "$(show)"
fi

# --- compare_runs: finished runs of a small sweep, one stopped by SIGTERM, the killed one --------
for lr in 0.05 0.01; do
  run "cmp_$lr" 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --max-steps 30 --lr "$lr" --checkpoint-every 10 --log-every 5 --checkpoint-dir "$TMP/cmp$lr" --log-dir "$TMP/cmp$lr/logs"
done
mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 20 --lr 0.02 --checkpoint-every 10 --log-every 5 --checkpoint-dir "$TMP/cmpstop" --log-dir "$TMP/cmpstop/logs" >"$TMP/cmpstop.out" 2>&1 &
s_pid=$!
wait_for "$TMP/cmpstop/logs/metrics.jsonl" 60 && sleep 2
kill -TERM "$s_pid"
wait "$s_pid"
cp -r "$TMP/logK" "$TMP/cmpkilled" && head -n "$(grep -n '"event":"start"' "$TMP/logK/metrics.jsonl" | sed -n 2p | cut -d: -f1)" \
  "$TMP/logK/metrics.jsonl" | head -n -1 >"$TMP/cmpkilled/metrics.jsonl"  # the killed run's part only
run compare 60 "$REPO/tools/compare_runs" "$TMP/cmp0.05" "$TMP/cmp0.01" "$TMP/cmpstop" "$TMP/cmpkilled" --sort lr -o "$TMP/runs.png"
table=$(cat "$OUT")
run compare_json 60 "$REPO/tools/compare_runs" "$TMP/cmp0.05" "$TMP/cmp0.01" "$TMP/cmpstop" --sort lr --json
got=$(python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
print(' '.join(d['differing_flags']), '|', ' '.join(f\"{r['config']['lr']}:{r['status']}:{r['steps']}\" for r in d['runs']))" "$OUT" 2>&1)
if grep -qE '^run +--epochs +--lr +--max-steps +top-1 +top-5 +loss +img/s +steps +status' <<<"$table" &&
   grep -qE '^cmp0.01 +1 +0\.01 +30 +[0-9.]+% .* 30 +finished$' <<<"$table" &&
   grep -qE '^cmpstop +20 +0\.02 +0 .* stopped \(SIGTERM\)$' <<<"$table" &&
   grep -qE '^cmpkilled +20 +0\.01 +0 .* failed$' <<<"$table" && [[ -s "$TMP/runs.png" ]] &&
   [[ "$got" =~ ^"epochs lr max_steps | 0.01:finished:30 0.02:stopped (SIGTERM):"[0-9]+" 0.05:finished:30"$ ]]; then
  pass "compare_runs_table_json_and_plot (differing flags, finished/stopped/failed, sorted)"
else
  fail "compare_runs: json '$got'" "$table"
fi
finish
