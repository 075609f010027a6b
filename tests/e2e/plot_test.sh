#!/usr/bin/env bash
# plot_test.sh — tools/plot_metrics on a real run's metrics.jsonl: one PNG with a line per run,
# as many loss/accuracy points as the file has train/eval records (the accuracy de-duplicated
# by step), and one clear error for a missing file or mismatched labels.
source "$(dirname "$0")/lib.sh"
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  echo "skip - plot_metrics (python3-matplotlib not installed: make deps)"
  finish
fi
DATA="$REPO/data/dataset"
run plot_run 300 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --epochs 1 --max-steps 30 --log-every 10 --eval-every 15 --progress off --log-dir "$TMP/run" --checkpoint-dir "$TMP/ckpt"
M="$TMP/run/metrics.jsonl"
train=$(grep -c '"event":"train"' "$M")
acc=$(grep -E '"event":"(eval|epoch)"' "$M" | grep -o '"step":[0-9]*' | sort -u | wc -l)
# The epoch's step split: one record, 30 steps, five positive phases that add up to its total,
# and the same figures in the log line.
split=$(/usr/bin/python3 -c "
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '\"step_time\"' in l]
p = [r[0][k + '_ms'] for k in ('data', 'forward', 'backward', 'comm', 'optimizer')] if r else []
ok = len(r) == 1 and r[0]['steps'] == 30 and r[0]['timing'] == 'host clocks' and all(v > 0 for v in p) and abs(sum(p) - r[0]['total_ms']) < 1e-6
print('ok %.2f ms' % r[0]['total_ms'] if ok else 'bad %s' % r)" "$M")
if [[ "$split" == ok* ]] && grep -q "^step time epoch 1 (rank 0, per-phase medians over 30 steps): [0-9.]* ms = data [0-9.]* + forward [0-9.]* + backward [0-9.]* + exposed comm [0-9.]* + optimizer [0-9.]* ms" "$OUT"; then
  pass "epoch_step_time_split_into_five_phases (${split#ok })"
else
  fail "step_time $split" "$(show)"
fi
run plot 120 "$REPO/tools/plot_metrics" "$M" "$M" --label first --label second -o "$TMP/m.png"
if [[ $RC -eq 0 ]] && grep -q "^first: $train loss points, $acc accuracy points" "$OUT" &&
   grep -q "^second: $train loss points" "$OUT" && [[ $train -eq 3 && $acc -eq 2 ]] &&
   grep -q "^first: .*, 1 step-time bars" "$OUT" &&
   [[ "$(head -c 8 "$TMP/m.png" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] &&
   (($(stat -c %s "$TMP/m.png") > 10000)); then
  pass "plot_metrics_png_from_two_runs ($train loss, $acc accuracy points each)"
else
  fail "plot_metrics rc=$RC train=$train acc=$acc" "$(show)"
fi
run plot_missing 60 "$REPO/tools/plot_metrics" "$TMP/nope.jsonl" -o "$TMP/x.png"
if [[ $RC -ne 0 ]] && grep -q "nope.jsonl: no such file" "$ERR" && [[ ! -e "$TMP/x.png" ]]; then
  pass "plot_metrics_missing_file_is_one_clear_error"
else
  fail "plot_metrics_missing rc=$RC" "$(show)"
fi
run plot_labels 60 "$REPO/tools/plot_metrics" "$M" "$M" --label only-one -o "$TMP/y.png"
if [[ $RC -ne 0 ]] && grep -q -- "--label given 1 times for 2 runs" "$ERR"; then
  pass "plot_metrics_label_count_checked"
else
  fail "plot_metrics_labels rc=$RC" "$(show)"
fi
finish
