#!/usr/bin/env bash
# train_test.sh — real training on the default dataset: 2 ranks x 1 epoch reaches the accuracy
# bar (>= 85% Fashion-MNIST, >= 98% MNIST), writes the log and JSONL metrics; a world of one and
# 4 oversubscribed ranks run; the replica check passes on a healthy run.
source "$(dirname "$0")/lib.sh"
DATA="$REPO/data/dataset"

run train_2ranks 600 env TZ=XYZ-14 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --epochs 1 --log-dir "$TMP/log2" --checkpoint-dir "$TMP/ckpt2" --progress off --check-replicas 100
top1=$(grep -o "done: .* test top-1 [0-9.]*%" "$OUT" | grep -o "[0-9.]*%$" | tr -d %)
bar=85
grep -q "^mnist (" "$DATA/DATASET" && bar=98
if [[ $RC -eq 0 && -n "$top1" ]] && awk -v t="$top1" -v b="$bar" 'BEGIN { exit !(t >= b) }'; then
  pass "train_2ranks_1epoch top-1 ${top1}% >= ${bar}% ($(grep -o 'at [0-9]* img/s' "$OUT"))"
else
  fail "train_2ranks_1epoch rc=$RC top1=$top1 bar=$bar" "$(show)"
fi
# Rank 0 prints one table of every rank (rank, local rank, host, pid, device), in rank order.
if [[ $(grep -c "^# rank  local  host  *pid  device$" "$OUT") == 1 ]] &&
   grep -A2 "^# rank  local  host" "$OUT" | sed -n 2p | grep -qE "^# +0 +0 +[^ ]+ +[0-9]+ +cpu$" &&
   grep -A2 "^# rank  local  host" "$OUT" | sed -n 3p | grep -qE "^# +1 +1 +[^ ]+ +[0-9]+ +cpu$"; then
  pass "placement_table_in_rank_order"
else
  fail "placement_table_in_rank_order" "$(show)"
fi
# The log's timestamps are ISO 8601 in UTC with the zone written (as metrics.jsonl's): this hour's
# UTC date and hour, whatever the time zone (the run above has TZ=XYZ-14, UTC+14, in POSIX form).
utc_hour=$(date -u +%Y-%m-%dT%H)
stamp=$(grep -m1 "done:" "$TMP/log2/mnist_train.log" | grep -oE '^\[[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z\]')
if grep -q "data: $(head -1 "$DATA/DATASET" | cut -c1-20)" "$OUT" && [[ -s "$TMP/log2/mnist_train.log" ]] &&
   [[ -n "$stamp" ]] && { [[ "${stamp:1:13}" == "$utc_hour" ]] || [[ "${stamp:1:13}" < "$utc_hour" ]]; }; then
  pass "log_names_dataset_and_file_log_written (timestamps in UTC, ISO 8601: $stamp)"
else
  fail "log_names_dataset_and_file_log_written" "$(show)"
fi
if python3 - "$TMP/log2/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ev = {r["event"] for r in rows}
assert {"train", "epoch", "done"} <= ev, ev
t = [r for r in rows if r["event"] == "train"]
assert all(k in t[0] for k in ("step", "epoch", "loss", "lr", "images_per_s", "comm_bytes")), t[0]
assert t[-1]["comm_bytes"] > t[0]["comm_bytes"] > 0
e = [r for r in rows if r["event"] == "epoch"][-1]
assert e["count"] == 10000, e
c = [r for r in rows if r["event"] == "comm"][-1]
assert c["buckets"] == 3 and c["overlap"] and c["wire_bytes"] > 0 and c["exposed_s"] >= 0, c
PY
then pass "metrics_jsonl_schema"; else fail "metrics_jsonl_schema" "$(head -3 "$TMP/log2/metrics.jsonl")"; fi

run train_single 300 "$BIN" --device cpu --data "$DATA" --epochs 1 --max-steps 30 --log-dir "$TMP/log1" --checkpoint-dir "$TMP/ckpt1" --progress off
if [[ $RC -eq 0 ]] && grep -q "1 rank(s)" "$OUT" && grep -q "done: 30 steps" "$OUT"; then pass "single_process_world_of_one"; else fail "single_process rc=$RC" "$(show)"; fi

run train_4ranks 300 mpirun -np 4 --oversubscribe "$BIN" --device cpu --data "$DATA" --epochs 1 --max-steps 20 --log-dir "$TMP/log4" --checkpoint-dir "$TMP/ckpt4" --progress off --check-replicas 5
if [[ $RC -eq 0 ]] && grep -q "4 rank(s)" "$OUT" && grep -q "(10000 images)" "$OUT"; then pass "four_ranks_oversubscribed"; else fail "four_ranks rc=$RC" "$(show)"; fi

# Live progress on a TTY (forced with --progress on) and mid-epoch evaluation with --eval-every.
run progress_and_eval_every 300 "$BIN" --device cpu --data "$DATA" --epochs 1 --max-steps 20 --eval-every 10 --progress on --log-dir "$TMP/logp" --checkpoint-dir "$TMP/ckptp"
if [[ $RC -eq 0 ]] && grep -q $'\r\033\[K' "$OUT" && grep -q "ETA" "$OUT" && grep -q "eval step 10: test loss" "$OUT" &&
   [[ $(grep -c '"event":"eval"' "$TMP/logp/metrics.jsonl") == 2 ]] && grep -q "epoch 1 step 20/20" "$TMP/logp/mnist_train.log"; then
  pass "live_progress_line_and_eval_every"
else
  fail "live_progress_line_and_eval_every rc=$RC" "$(show)"
fi

# The reference CPU kernels train too (same flags, same data).
run reference_kernels 300 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --epochs 1 --max-steps 20 --cpu-kernels reference --log-dir "$TMP/logr" --checkpoint-dir "$TMP/ckptr" --progress off
if [[ $RC -eq 0 ]] && grep -q "(reference kernels)" "$OUT" && grep -q "done: 20 steps" "$OUT"; then pass "reference_kernels_train"; else fail "reference_kernels rc=$RC" "$(show)"; fi

# Post-local SGD, 4 ranks as 2 "nodes" of 2 (test seam): global all-reduce for 9 steps, then
# node-local gradient averaging and a global parameter average after steps 9, 14, 19, ... (0-based)
# — so all replicas agree at step counts 5, 10, 15, 20 ... and the two nodes differ in between.
LS=(--device cpu --data "$DATA" --epochs 1 --max-steps 40 --local-sgd-start 9 --local-sgd-period 5 --progress off)
run local_sgd_synced 300 env MNIST_DDP_TEST_RANKS_PER_NODE=2 mpirun -np 4 --oversubscribe "$BIN" "${LS[@]}" --check-replicas 5 --log-dir "$TMP/lls1" --checkpoint-dir "$TMP/cls1"
rc_synced=$RC; out_synced="$(show)"
grep -q "within groups of 2 rank(s)" "$OUT" || rc_synced=99
run local_sgd_between 300 env MNIST_DDP_TEST_RANKS_PER_NODE=2 mpirun -np 4 --oversubscribe "$BIN" "${LS[@]}" --check-replicas 3 --log-dir "$TMP/lls2" --checkpoint-dir "$TMP/cls2"
if [[ $rc_synced -eq 0 ]] && [[ $RC -eq 3 ]] &&
   grep -q "after step 12 the parameters of rank(s) 2, 3 differ" "$ERR" "$OUT"; then
  pass "post_local_sgd_averages_every_period_and_nodes_drift_between"
else
  fail "post_local_sgd synced_rc=$rc_synced between_rc=$RC" "$out_synced$(show)"
fi

# The communication plan's thread engine: --overlap-engine thread opens the thread; with PowerSGD
# (which reduces whole buckets after backward on the training thread) it opens none and says why.
TE=(--device cpu --data "$DATA" --epochs 1 --max-steps 4 --overlap-engine thread --progress off)
run thread_engine 120 mpirun -np 2 "$BIN" "${TE[@]}" --log-dir "$TMP/lte" --checkpoint-dir "$TMP/cte"
rc_thread=$RC; out_thread="$(show)"
grep -q "^communication thread: on" "$OUT" && grep -q "done: 4 steps" "$OUT" || rc_thread=99
run thread_powersgd 120 mpirun -np 2 "$BIN" "${TE[@]}" --compression powersgd --log-dir "$TMP/ltp" --checkpoint-dir "$TMP/ctp"
if [[ $rc_thread -eq 0 && $RC -eq 0 ]] && grep -q "done: 4 steps" "$OUT" &&
   grep -q "^communication thread off: PowerSGD" "$OUT" && ! grep -q "^communication thread: on" "$OUT"; then
  pass "thread_engine_opens_its_thread_and_powersgd_opens_none"
else
  fail "thread_engine thread_rc=$rc_thread powersgd_rc=$RC" "$out_thread" "$(show)"
fi
finish
