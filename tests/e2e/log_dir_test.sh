#!/usr/bin/env bash
# log_dir_test.sh — a log directory belongs to one running job, as the checkpoint directory does
# (DIR/.mnist_ddp.log.lock: checkpoint/dir_lock.hpp kLogDir), and nothing a later run does by
# accident costs an earlier run's records:
# - two jobs with their own --checkpoint-dir and one --log-dir, the second started while the first
#   runs: the second is refused naming the directory and the holder; the first keeps every record
#   its own, whole and parseable, to its end (before the lock: its metrics.jsonl truncated to the
#   second's records plus a torn fragment, its log interleaved);
# - --eval-only and --dry-run beside the running job keep working, and touch none of its files;
# - a new run in the directory of a finished one appends a new lineage after its records (after a
#   record a killed job left half written, on a line of its own), which tools/compare_runs reads
#   as its own run; --clear-logs starts the files empty;
# - the holder's flight-recorder dump survives the refused job and the visitors.
source "$(dirname "$0")/lib.sh"
DATA="$(small_data)"
COMMON=(--device cpu --data "$DATA" --progress off --batch-size 100)
MPI=(mpirun -np 2 "$BIN")
# run_ids FILE: the distinct run ids of FILE's start records, in order.
run_ids() { python3 -c 'import json,sys
seen=[]
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r.get("event")=="start" and r["run_id"] not in seen: seen.append(r["run_id"])
print(" ".join(seen))' "$1"; }
# whole_json FILE: every line of FILE is one JSON object (no torn or interleaved record).
whole_json() { python3 -c 'import json,sys
for n,l in enumerate(open(sys.argv[1]),1):
    assert isinstance(json.loads(l),dict), n' "$1" 2>/dev/null; }

# A checkpoint to evaluate beside the running job (its own directories).
run seed 120 "${MPI[@]}" "${COMMON[@]}" --max-steps 5 --checkpoint-dir "$TMP/seed.c" --log-dir "$TMP/seed.l"
seed_ckpt=$(ls "$TMP/seed.c"/ckpt-*.h5 2>/dev/null | tail -1)
[[ $RC -eq 0 && -n "$seed_ckpt" ]] || fail "seed_checkpoint rc=$RC" "$(show)"

# 1. Job A holds L: B, the eval and the dry run start once A's lock says it holds L and its first
#    record is written. A runs until they are done, whatever this machine's speed: 1000 steps with
#    rank 0's forward pass 100 ms longer each (100 s at least), ended by a SIGTERM to its rank 0
#    (an agreed stop at the next step: its checkpoint, a "stopped" record, exit 143).
L="$TMP/shared.l"
OUT_A="$TMP/a.out" ERR_A="$TMP/a.err"
timeout --kill-after=10 300 "${MPI[@]}" "${COMMON[@]}" --max-steps 1000 --log-every 10 \
  --debug-slow 0:forward:100 --checkpoint-dir "$TMP/a.c" --log-dir "$L" >"$OUT_A" 2>"$ERR_A" &
pid_a=$!
for _ in $(seq 1 600); do
  grep -qs '"state":"held"' "$L/.mnist_ddp.log.lock" && grep -qs '"event":"start"' "$L/metrics.jsonl" && break
  kill -0 $pid_a 2>/dev/null || break
  sleep 0.1
done
holder_pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$L/.mnist_ddp.log.lock" 2>/dev/null)
# A's rank 0 dumps its flight recorder (the dump signal: it runs on): evidence that neither the
# refused job nor the visitors may remove or replace.
[[ -n "$holder_pid" ]] && kill -USR2 "$holder_pid"
for _ in $(seq 1 100); do [[ -s "$L/flight-rank0.json" ]] && break; sleep 0.1; done
dump_pid() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$L/flight-rank0.json" 2>/dev/null; }
snapshot_lines=$(wc -l <"$L/metrics.jsonl" 2>/dev/null || echo 0)
log_lines_before=$(wc -l <"$L/mnist_train.log" 2>/dev/null || echo 0)

run second_job 120 "${MPI[@]}" "${COMMON[@]}" --max-steps 60 --checkpoint-dir "$TMP/b.c" --log-dir "$L"
if [[ $RC -eq 2 ]] && [[ $(grep -c "^mnist_ddp: error: " "$ERR") == 1 ]] &&
   grep -q -- "--log-dir $L is in use: held by host .* pid $holder_pid" "$ERR" &&
   [[ -z "$(ls "$TMP/b.c" 2>/dev/null)" ]] && holds "$SECS < 30"; then
  pass "second_job_refused ($(grep -m1 -o 'is in use: held by host [^,]*' "$ERR"))"
else
  fail "second_job_refused rc=$RC holder=$holder_pid" "$(show)"
fi

run eval_beside 120 "${MPI[@]}" "${COMMON[@]}" --eval-only --resume "$seed_ckpt" --checkpoint-dir "$TMP/seed.c" --log-dir "$L"
if [[ $RC -eq 0 ]] && grep -q "top-1" "$OUT" && grep -q -- "--log-dir $L is in use" "$ERR" &&
   ! grep -qs "eval-only" "$L/mnist_train.log"; then
  pass "eval_only_beside_a_running_job ($(grep -m1 -o 'top-1 [0-9.]*%' "$OUT"), console only)"
else
  fail "eval_only_beside_a_running_job rc=$RC" "$(show)"
fi

run dry_beside 120 "${MPI[@]}" "${COMMON[@]}" --dry-run --checkpoint-dir "$TMP/d.c" --log-dir "$L"
if [[ $RC -eq 0 ]] && grep -q "dry run" "$OUT" && grep -q -- "--log-dir $L is in use" "$ERR" &&
   ! grep -qs "dry run" "$L/mnist_train.log"; then
  pass "dry_run_beside_a_running_job"
else
  fail "dry_run_beside_a_running_job rc=$RC" "$(show)"
fi

kill -0 $pid_a 2>/dev/null && still_running=yes || still_running=no
[[ -n "$holder_pid" ]] && kill -TERM "$holder_pid" 2>/dev/null
wait $pid_a
rc_a=$?
ids=$(run_ids "$L/metrics.jsonl" 2>/dev/null)
if [[ $rc_a -eq 143 && $still_running == yes ]] && whole_json "$L/metrics.jsonl" &&
   [[ $(wc -w <<<"$ids") == 1 ]] && grep -q '"event":"stopped"' "$L/metrics.jsonl" && ((snapshot_lines > 0)) &&
   [[ $(grep -c "config: " "$L/mnist_train.log") == 1 ]] && ((log_lines_before > 0)); then
  pass "first_job_keeps_its_records (one run id $ids, $(wc -l <"$L/metrics.jsonl") whole records, one config line in its log)"
else
  fail "first_job_keeps_its_records rc=$rc_a running=$still_running ids='$ids'" "$(tail -n 5 "$ERR_A")" "$(grep -c config: "$L/mnist_train.log" 2>/dev/null) config lines"
fi
if [[ "$(dump_pid)" == "$holder_pid" && -n "$holder_pid" ]] && [[ ! -e "$L/flight-rank1.json" ]]; then
  pass "the_holders_flight_dump_survives_the_refused_job_and_the_visitors"
else
  fail "holders_flight_dump: dump pid '$(dump_pid)', holder '$holder_pid'" "$(ls -la "$L")"
fi
lock_state=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["state"])' "$L/.mnist_ddp.log.lock" 2>/dev/null)
[[ "$lock_state" == released ]] && pass "log_lock_released_at_the_end" || fail "log_lock_released_at_the_end: state '$lock_state'"

# 2. A new run in the finished run's directory: a second lineage after the first's records, kept
#    byte for byte; compare_runs reads the new one as the run; --clear-logs starts empty.
cp "$L/metrics.jsonl" "$TMP/first.jsonl"
first_n=$(wc -l <"$TMP/first.jsonl")
# As a job killed while writing leaves it: half a record, no newline. The next run starts its
# own line after it, and the readers skip the fragment with a warning.
printf '{"event":"train","st' >>"$L/metrics.jsonl"
run next_run 120 "${MPI[@]}" "${COMMON[@]}" --max-steps 5 --checkpoint-dir "$TMP/n.c" --log-dir "$L"
ids=$(grep -v '"st$' "$L/metrics.jsonl" | run_ids /dev/stdin 2>/dev/null)
new_id=$(awk '{print $2}' <<<"$ids")
fragment=$(sed -n "$((first_n + 1))p" "$L/metrics.jsonl")
"$REPO/tools/compare_runs" --json "$L" >"$TMP/cmp.json" 2>"$TMP/cmp.err"
if [[ $RC -eq 0 ]] && cmp -s <(head -n "$first_n" "$L/metrics.jsonl") "$TMP/first.jsonl" &&
   [[ "$fragment" == '{"event":"train","st' ]] && [[ $(wc -w <<<"$ids") == 2 ]] &&
   grep -q "\"run_id\": \"$new_id\"" "$TMP/cmp.json" &&
   grep -q "metrics.jsonl:$((first_n + 1)): a record cut short before the next run's start" "$TMP/cmp.err"; then
  pass "new_run_appends_a_lineage (the first's $first_n records kept, a torn line ended, compare_runs reads run $new_id)"
else
  fail "new_run_appends_a_lineage rc=$RC ids='$ids'" "$(show)"
fi
run cleared 120 "${MPI[@]}" "${COMMON[@]}" --max-steps 5 --checkpoint-dir "$TMP/k.c" --log-dir "$L" --clear-logs
ids=$(run_ids "$L/metrics.jsonl" 2>/dev/null)
if [[ $RC -eq 0 ]] && [[ $(wc -w <<<"$ids") == 1 ]] && [[ "$ids" != *"$new_id"* ]] &&
   [[ $(grep -c "config: " "$L/mnist_train.log") == 1 ]]; then
  pass "clear_logs_starts_empty (one run id: $ids)"
else
  fail "clear_logs_starts_empty rc=$RC ids='$ids'" "$(show)"
fi
finish
