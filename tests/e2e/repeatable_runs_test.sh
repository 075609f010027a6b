#!/usr/bin/env bash
# repeatable_runs_test.sh — runs a user can repeat, check and compare (docs/repeatable-runs.md):
# --write-config / --config (a run from the written file trains the same steps bit for bit; the
# file a checkpoint's stored configuration becomes is the same), --dry-run under mpirun (the
# plan, every check, nothing written but the log), --keep-best with --resume best and --eval-only
# --resume best, metrics.jsonl's schema and run totals across a resume, and tools/compare_runs
# --time-to / --format. CPU, 2 ranks, the 6,000-image subset (47 steps an epoch at batch 64, 30
# at the default 100).
source "$(dirname "$0")/lib.sh"
DATA="$(small_data)"
same_state() {
  h5diff -q "$1" "$2" /model /model >/dev/null && h5diff -q "$1" "$2" /optimizer /optimizer >/dev/null
}
settings() { grep -v '^#' "$1" | grep -v '^$'; }  # a config file without its comments
flags=(--device cpu --data "$DATA" --epochs 2 --max-steps 20 --lr 0.03 --seed 5 --batch-size 64
       --weight-decay 0.0001 --lr-schedule cosine --progress off)

# --- 1. --write-config, then a run from the file: the same steps, bit for bit -------------------
run write_config 60 "$BIN" "${flags[@]}" --checkpoint-dir "$TMP/A" --log-dir "$TMP/A" --write-config "$TMP/run.toml"
wrote=$RC
run from_flags 300 mpirun -np 2 "$BIN" "${flags[@]}" --checkpoint-dir "$TMP/A" --log-dir "$TMP/A"
rc_a=$RC
# The file, with where outputs go overridden on the command line.
run from_file 300 mpirun -np 2 "$BIN" --config "$TMP/run.toml" --checkpoint-dir "$TMP/B" --log-dir "$TMP/B"
if [[ $wrote -eq 0 && $rc_a -eq 0 && $RC -eq 0 ]] && grep -q '^lr-schedule = "cosine"$' "$TMP/run.toml" &&
   same_state "$TMP/A/ckpt-00000020.h5" "$TMP/B/ckpt-00000020.h5"; then
  pass "run_from_written_config_trains_the_same_steps_bit_for_bit ($(settings "$TMP/run.toml" | wc -l) settings; h5diff of step 20)"
else
  fail "run_from_written_config rc=$wrote/$rc_a/$RC" "$(show)"
fi

# The configuration stored in the checkpoint is the same file; flags given override it; the Slurm
# scripts' --resume auto on a directory without checkpoints writes the run's own, as a run starts
# fresh there.
run write_from_ckpt 60 "$BIN" --write-config "$TMP/from_ckpt.toml" --resume "$TMP/A/ckpt-00000020.h5"
run write_fresh_auto 60 "$BIN" "${flags[@]}" --write-config "$TMP/fresh.toml" --resume auto --checkpoint-dir "$TMP/empty"
fresh=$RC
run write_from_ckpt_over 60 "$BIN" --write-config "$TMP/over.toml" --resume auto --checkpoint-dir "$TMP/A" --epochs 7
if [[ $RC -eq 0 && $fresh -eq 0 ]] && grep -q "^# --resume auto: no checkpoint in $TMP/empty yet" "$TMP/fresh.toml" &&
   grep -q '^lr = 0.03$' "$TMP/fresh.toml" && grep -q '^resume = "auto"$' "$TMP/fresh.toml" && diff <(settings "$TMP/run.toml") <(settings "$TMP/from_ckpt.toml") >/dev/null &&
   grep -q "^# The configuration stored in $TMP/A/ckpt-00000020.h5 (step 20, run id [0-9a-f]*)" "$TMP/from_ckpt.toml" &&
   diff <(settings "$TMP/run.toml" | sed 's/^epochs = 2$/epochs = 7/') <(settings "$TMP/over.toml") >/dev/null; then
  pass "write_config_from_a_checkpoint_gives_the_runs_file (--resume PATH; --resume auto --epochs 7 overrides; --resume auto without checkpoints: the run's own)"
else
  fail "write_config_from_checkpoint rc=$RC" "$(diff <(settings "$TMP/run.toml") <(settings "$TMP/over.toml"))" "$(show)"
fi

# --- 2. Bad input: one error naming the file and the fix, every rank gone, nothing damaged -------
sum_before=$(md5sum "$TMP/A/ckpt-00000020.h5")
run overwrite_ckpt 60 "$BIN" --write-config "$TMP/A/ckpt-00000020.h5"
e1=$RC; e1_msg=$(cat "$ERR")
printf 'epochs = 2\nbatch_size = 64\n' >"$TMP/typo.toml"
run unknown_key 60 mpirun -np 2 "$BIN" --config "$TMP/typo.toml" --data "$DATA"
e2=$RC; e2_msg=$(cat "$ERR")
run missing_config 60 mpirun -np 2 "$BIN" --config "$TMP/nope.toml"
e3=$RC; e3_msg=$(cat "$ERR")
run write_nowhere 60 "$BIN" --write-config "$TMP/no-such-dir/run.toml"
e4=$RC; e4_msg=$(cat "$ERR")
run no_best 60 "$BIN" --device cpu --data "$DATA" --eval-only --resume best --checkpoint-dir "$TMP/A" --log-dir "$TMP/nb"
if [[ $e1 -eq 2 && $e2 -eq 2 && $e3 -eq 2 && $e4 -eq 2 && $RC -eq 2 ]] && [[ "$(md5sum "$TMP/A/ckpt-00000020.h5")" == "$sum_before" ]] &&
   grep -q -- "--write-config $TMP/no-such-dir/run.toml: cannot write it (No such file or directory)" <<<"$e4_msg" &&
   grep -q "that is an HDF5 file (a checkpoint?), not overwritten" <<<"$e1_msg" &&
   [[ $(grep -c "unknown key 'batch_size'" <<<"$e2_msg") -eq 1 ]] &&
   grep -q "nope.toml: cannot read that file" <<<"$e3_msg" &&
   grep -q -- "--eval-only --resume best: --checkpoint-dir $TMP/A has no best checkpoint (ckpt-best.h5; a run trained with --keep-best keeps one)" "$ERR"; then
  pass "bad_config_input_is_one_error_naming_file_and_fix (HDF5 not overwritten; unknown key, missing file under mpirun; --resume best without one)"
else
  fail "bad_config_input rc=$e1/$e2/$e3/$e4/$RC" "$e1_msg" "$e2_msg" "$e3_msg" "$e4_msg" "$(show)"
fi

# --- 3. --dry-run under mpirun: the plan, every check, nothing written but the log ---------------
metrics_before=$(md5sum "$TMP/A/metrics.jsonl")
lines_before=$(wc -l <"$TMP/A/mnist_train.log")
run dry_run 120 mpirun -np 2 "$BIN" "${flags[@]}" --max-steps 50 --checkpoint-every 15 --keep-best --eval-every 10 --dry-run --checkpoint-dir "$TMP/dry/ckpt" --log-dir "$TMP/A"
if [[ $RC -eq 0 ]] && [[ ! -e "$TMP/dry" ]] && [[ "$(md5sum "$TMP/A/metrics.jsonl")" == "$metrics_before" ]] &&
   grep -q "^plan: 50 step(s), 1 to 50 (2 epoch(s) x 47 steps/epoch, capped by --max-steps)" "$OUT" &&
   grep -q "^plan: each step 64 image(s) per rank = 128 globally on 2 rank(s) (1 node(s), device cpu); 47 batch(es) per rank per epoch" "$OUT" &&
   grep -q "^plan: 5 checkpoint(s) into $TMP/dry/ckpt (steps 15 30 45 47 50;" "$OUT" &&
   grep -q "^dry run: --checkpoint-dir $TMP/dry/ckpt does not exist yet; a run creates it" "$OUT" &&
   grep -q "^dry run: every check before the first step passed" "$OUT" &&
   (( $(wc -l <"$TMP/A/mnist_train.log") > lines_before )) && ! grep -q "^done:" "$OUT"; then
  pass "dry_run_under_mpirun_plans_and_writes_nothing_but_the_log ($(grep -c '^plan:' "$OUT") plan lines; metrics.jsonl untouched, no checkpoint dir)"
else
  fail "dry_run rc=$RC" "$(show)"
fi
# A resumed run's plan; a check that fails is the run's own error (missing data, held directory).
run dry_resume 120 mpirun -np 2 "$BIN" "${flags[@]}" --max-steps 40 --resume auto --dry-run --checkpoint-dir "$TMP/A" --log-dir "$TMP/A"
r1=$RC; r1_out=$(cat "$OUT")
run dry_bad_data 60 mpirun -np 2 "$BIN" --device cpu --data "$TMP/no-data" --dry-run --checkpoint-dir "$TMP/dd" --log-dir "$TMP/dd"
if [[ $r1 -eq 0 && $RC -eq 2 ]] && grep -q "^resume: $TMP/A/ckpt-00000020.h5" <<<"$r1_out" &&
   grep -q "^plan: 20 step(s), 21 to 40 .*continuing from step 20" <<<"$r1_out" &&
   [[ $(grep -c -- "--data $TMP/no-data: directory does not exist" "$ERR") -eq 1 ]] && [[ ! -e "$TMP/dd/metrics.jsonl" ]]; then
  pass "dry_run_checks_resume_and_data (continues from step 20; a missing --data is one error)"
else
  fail "dry_run_checks rc=$r1/$RC" "$r1_out" "$(show)"
fi

# --- 4. --keep-best, --resume best, --eval-only --resume best ------------------------------------
# Twenty good steps, then twenty at --lr 0.5 that wreck the model (top-1 falls below 30 %): the
# best stays one of the first twenty while --keep 1 rotates on to step 40.
kflags=(--device cpu --data "$DATA" --epochs 2 --eval-every 5 --keep 1 --keep-best --progress off --checkpoint-dir "$TMP/K" --log-dir "$TMP/K")
run keep_best 300 mpirun -np 2 "$BIN" "${kflags[@]}" --max-steps 20
kb=$RC
run keep_best_worse 300 mpirun -np 2 "$BIN" "${kflags[@]}" --max-steps 40 --resume auto --lr 0.5
kb=$((kb + RC))
best_py='import json,sys
r=[json.loads(l) for l in open(sys.argv[1])]
ev=[x for x in r if x["event"] in ("eval","epoch")]
b=[x for x in r if x["event"]=="best"]
top=max(ev,key=lambda x:x["top1"])
ok=b and b[-1]["top1"]==top["top1"] and b[-1]["step"]==min(x["step"] for x in ev if x["top1"]==top["top1"])
print(top["step"], top["top1"]) if ok else sys.exit("best records %s do not match the evaluations %s" % (b, ev))'
read -r best_step best_top1 < <(python3 -c "$best_py" "$TMP/K/metrics.jsonl")
file_best=$(h5dump -a /progress/best_top1 "$TMP/K/ckpt-best.h5" 2>/dev/null | grep -o '(0): [0-9.]*' | cut -d' ' -f2)
run eval_best 120 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --eval-only --resume best --checkpoint-dir "$TMP/K" --log-dir "$TMP/K-eval"
pct=$(awk -v t="$best_top1" 'BEGIN { printf "%.2f", 100 * t }')
if [[ $kb -eq 0 && $RC -eq 0 && -n "$best_step" ]] && (( best_step <= 20 )) &&
   [[ "$(ls "$TMP/K" | grep '^ckpt-.*\.h5$' | paste -sd ' ')" == "ckpt-00000040.h5 ckpt-best.h5" ]] &&
   awk -v a="$file_best" -v b="$best_top1" 'BEGIN { exit !(a == b) }' &&
   grep -q "^eval-only: $TMP/K/ckpt-best.h5 (the model of step $best_step)" "$OUT" &&
   grep -q "test top-1 ${pct}%" "$OUT"; then
  pass "keep_best_keeps_the_best_evaluation_out_of_the_rotation (step $best_step, top-1 ${pct}%, kept while --keep 1 rotated on to step 40; --eval-only --resume best gives it back)"
else
  fail "keep_best rc=$kb/$RC best=$best_step/$best_top1 file=$file_best" "$(ls "$TMP/K")" "$(show)"
fi
run resume_best 300 mpirun -np 2 "$BIN" "${kflags[@]}" --max-steps 30 --resume best
if [[ $RC -eq 0 ]] && grep -q "^resume: $TMP/K/ckpt-best.h5 (the best checkpoint: test top-1 ${pct}% at step $best_step)" "$OUT" &&
   grep -q "^resume: step $best_step, " "$OUT" &&
   grep -q "warning: resume: $TMP/K/ckpt-best.h5 is at step $best_step, and 1 checkpoint(s) of this run at later steps" "$ERR" &&
   [[ "$(ls "$TMP/K" | grep '^ckpt-.*\.h5$' | paste -sd ' ')" == "ckpt-00000030.h5 ckpt-00000040.h5 ckpt-best.h5" ]]; then
  pass "resume_best_continues_from_the_best_checkpoint (step $best_step; the replaced branch's step 40 named, kept, not counted by --keep 1)"
else
  fail "resume_best rc=$RC" "$(show)"
fi
# Another run's best in the directory: refused like its other checkpoints.
run other_run_best 120 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --epochs 1 --max-steps 5 --keep-best --progress off --checkpoint-dir "$TMP/K" --log-dir "$TMP/K2"
if [[ $RC -eq 2 ]] && grep -q "ckpt-best.h5 (run id " "$ERR" && grep -q "holds .* checkpoint(s) of another run" "$ERR"; then
  pass "another_runs_best_checkpoint_is_not_overwritten"
else
  fail "other_run_best rc=$RC" "$(show)"
fi

# --- 5. metrics.jsonl: schema, and the run's totals across a resume --------------------------------
run part1 300 mpirun -np 2 "$BIN" "${flags[@]}" --max-steps 10 --eval-every 5 --checkpoint-dir "$TMP/T" --log-dir "$TMP/T"
p1=$RC
run part2 300 mpirun -np 2 "$BIN" "${flags[@]}" --max-steps 20 --eval-every 5 --resume auto --checkpoint-dir "$TMP/T" --log-dir "$TMP/T"
totals_py='import json,sys
r=[json.loads(l) for l in open(sys.argv[1])]
assert all(x.get("schema")==2 for x in r), "a record without schema 2"
ev=[x for x in r if x["event"] in ("eval","epoch","done")]
assert all("wall_s" in x and "train_s" in x and "images_seen" in x for x in ev), ev
assert not any("time_s" in x for x in r), "time_s is gone in schema 2"
ck=[x for x in r if x["event"]=="checkpoint" and x["step"]==10][0]
e20=[x for x in ev if x["event"]=="eval" and x["step"]==20][0]
assert e20["images_seen"]==20*2*64, e20
assert e20["wall_s"]>ck["wall_s"] and e20["train_s"]>ck["train_s"], (ck, e20)
assert all(a["train_s"]<=b["train_s"] for a,b in zip(ev,ev[1:])), [x["train_s"] for x in ev]
print("%.2f %.2f" % (ck["wall_s"], e20["wall_s"]))'
if [[ $p1 -eq 0 && $RC -eq 0 ]] && totals=$(python3 -c "$totals_py" "$TMP/T/metrics.jsonl" 2>&1); then
  pass "run_totals_continue_across_a_resume (wall_s at the step-10 checkpoint, at step 20 after the resume: $totals; images_seen 2560)"
else
  fail "run_totals rc=$p1/$RC" "$totals" "$(show)"
fi

# --- 6. tools/compare_runs --time-to and --format ---------------------------------------------------
first_py='import json,sys
r=[json.loads(l) for l in open(sys.argv[1])]
print([x["wall_s"] for x in r if x["event"] in ("eval","epoch","done") and x["top1"]>=float(sys.argv[2])][0])'
target=0.5
want=$(python3 -c "$first_py" "$TMP/T/metrics.jsonl" $target)
run compare_time_to 60 "$REPO/tools/compare_runs" "$TMP/T" "$TMP/A" --time-to $target --format json
got=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print({r["run"]: r["time_to"] for r in d["runs"]}["T"])' "$OUT" 2>&1)
run compare_csv 60 "$REPO/tools/compare_runs" "$TMP/T" "$TMP/A" --time-to $target --format csv
csv_ok=$(head -1 "$OUT")
run compare_table 60 "$REPO/tools/compare_runs" "$TMP/T" "$TMP/A" --time-to 0.999 --sort time_to
table=$(cat "$OUT")
echo '{"event": "eval", "schema": 99, "step": 1, "top1": 0.1}' >"$TMP/future.jsonl"
run compare_percent 60 "$REPO/tools/compare_runs" "$TMP/T" --time-to 99
percent_rc=$RC; percent_msg=$(cat "$ERR")
run compare_future 60 "$REPO/tools/compare_runs" "$TMP/future.jsonl"
if [[ "$got" == "$want" ]] && [[ $percent_rc -ne 0 ]] &&
   grep -q -- "--time-to 99: give top-1 as a fraction of the test set, e.g. --time-to 0.99 for 99%" <<<"$percent_msg" && [[ "$csv_ok" == run,*time_to_wall_s,time_to_train_s,time_to_step,time_to_images ]] &&
   grep -q "to 99.9% (wall)" <<<"$table" && grep -qE "^T .* - +- +- +finished$" <<<"$table" &&
   [[ $RC -ne 0 ]] && grep -q "metrics schema 99, this compare_runs reads 1 to 2" "$ERR"; then
  pass "compare_runs_time_to_and_formats (T reached top-1 $target at wall $got s; csv header; '-' where never; a percentage refused; schema 99 refused)"
else
  fail "compare_runs got=$got want=$want csv=$csv_ok" "$table" "$(show)"
fi
finish
