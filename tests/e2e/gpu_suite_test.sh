#!/usr/bin/env bash
# gpu_suite_test.sh — the GPU harness's own checks, here without a GPU: `tools/gpu-suite.sh first`
# must print its summary last with the one-line verdict as the very last line, put a failing
# step's last lines into the summary (at most 8 lines a failure, 60 lines in all), leave at most 4
# files in $OUT, refuse an unknown GPU_STEPS name, and say "not run" for a step its budget cannot
# hold. The self-test steps (selftest_pass, selftest_fail) need no bundle and no GPU. Then the speed
# table (bench/gpu_table.py) on made-up runs: medians, and the ratios against PyTorch eager and
# torch.compile computed from them.
source "$(dirname "$0")/lib.sh"
cd "$REPO" || exit 1

out="$TMP/out"
run suite_selftest 120 env OUT="$out" GPU_STEPS=selftest_pass,selftest_fail tools/gpu-suite.sh first
sum="$out/summary-first.txt"
verdict='first light: correct no; 10 epochs - s; -x eager; -x compile'
why=""
[[ $RC -ne 0 ]] || why+=" exit-0-despite-a-failing-step"
[[ "$(tail -n 1 "$OUT")" == "$verdict" ]] || why+=" last-printed-line:'$(tail -n 1 "$OUT")'"
[[ "$(tail -n 1 "$sum" 2>/dev/null)" == "$verdict" ]] || why+=" summary-last-line:'$(tail -n 1 "$sum" 2>/dev/null)'"
grep -qE '^PASS +selftest_pass ' "$sum" || why+=" no-PASS-row"
grep -qE '^FAIL +selftest_fail .*exit 3' "$sum" || why+=" no-FAIL-row-with-exit-3"
# The failure's tail: its last line in, and no more than 8 lines for it (heading + 7).
grep -qx 'last: selftest failure line 30' "$sum" || why+=" failure-tail-missing"
n_fail=$(grep -c 'selftest failure line' "$sum")
((n_fail >= 1 && n_fail <= 7)) || why+=" failure-lines=$n_fail"
grep -q '^### selftest_fail' "$sum" || why+=" no-failure-heading"
lines=$(wc -l <"$sum")
((lines <= 60)) || why+=" summary-has-$lines-lines"
files=$(find "$out" -type f | wc -l)
((files <= 4)) || why+=" $files-files-in-OUT"
[[ -f "$out/console-first.txt" && -f "$out/logs-first.tar.gz" ]] || why+=" no-console-or-logs"
if [[ -z $why ]]; then
  pass "gpu_suite_first_prints_the_verdict_last_with_the_failing_steps_tail ($lines summary lines, $n_fail tail lines, $files files)"
else
  fail "gpu_suite_first_summary:$why" "$(show)" "--- summary" "$(cat "$sum" 2>/dev/null)"
fi

run suite_unknown 30 env OUT="$TMP/out2" GPU_STEPS=preflight,no_such_step tools/gpu-suite.sh first
if [[ $RC -eq 2 ]] && grep -q "unknown step 'no_such_step' in GPU_STEPS" "$ERR"; then
  pass "gpu_suite_first_refuses_an_unknown_step_name"
else
  fail "gpu_suite_unknown_step rc=$RC" "$(show)"
fi

# 45 s: the stage keeps 10 s to pack, so 35 s are left; while the first step would run, the second
# one's floor (20 s) and 10 s for the summary are kept back, which leaves it less than the 10 s a
# step needs: it is not run, the second one is (with up to 15 s of a slow start to spare), and the
# verdict is still the last line.
run suite_budget 60 env OUT="$TMP/out3" GPU_FIRST_BUDGET_S=45 GPU_STEPS=selftest_fail,selftest_pass tools/gpu-suite.sh first
sum3="$TMP/out3/summary-first.txt"
if [[ $RC -ne 0 ]] && grep -qE "^FAIL +selftest_fail .*not run: [0-9]+ s left of the stage's 35, 30 kept for the steps after it" "$sum3" &&
   grep -qE '^PASS +selftest_pass ' "$sum3" && [[ "$(tail -n 1 "$OUT")" == "$verdict" ]]; then
  pass "gpu_suite_first_keeps_the_later_steps_floor_and_says_not_run"
else
  fail "gpu_suite_budget rc=$RC" "$(show)" "--- summary" "$(cat "$sum3" 2>/dev/null)"
fi

# amp's FP32 reference comes from graphs_bitwise's log: the line gpu_test.sh's graphs_one_epoch
# prints, read by the suite's own helper (sourced: it defines and runs nothing).
mkdir -p "$TMP/flogs"
printf '%s\n' 'ok - cuda_graphs_one_epoch_replay_equals_eager (CUDA graphs: 1 captured ...; FP32 top-1 87.53%) [9 s]' \
  '# fp32_top1 87.53' 'end - gpu_test' >"$TMP/flogs/graphs_bitwise.log"
got=$(LOGS="$TMP/flogs" bash -c 'source tools/gpu-suite.sh && fp32_top1')
if [[ "$got" == 87.53 ]]; then
  pass "gpu_suite_reads_the_fp32_reference_for_amp ($got)"
else
  fail "gpu_suite_fp32_reference: got '$got' (want 87.53)"
fi

# sanitize_ops' verdict (check_sanitizer_ops) on made-up logs of its two runs: clean summaries of
# both tools with the tests passed under each is 2 passed; an error, a hazard, a skipped test or a
# run that never finished is a failure.
clean_mem='========= ERROR SUMMARY: 0 errors' clean_race='========= RACECHECK SUMMARY: 0 hazards'
passed='[  PASSED  ] 2 tests.'
printf '%s\n' "$passed" "$clean_mem" "$passed" "$clean_race" >"$TMP/flogs/san_clean.log"
printf '%s\n' "$passed" '========= ERROR SUMMARY: 3 errors' "$passed" "$clean_race" >"$TMP/flogs/san_mem.log"
printf '%s\n' "$passed" "$clean_mem" "$passed" '========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)' >"$TMP/flogs/san_race.log"
printf '%s\n' "$passed" "$clean_mem" '[  SKIPPED ] GpuOps.ConvolutionsMatchCpu' "$passed" "$clean_race" >"$TMP/flogs/san_skip.log"
printf '%s\n' "$passed" "$clean_mem" >"$TMP/flogs/san_cut.log"
got=$(bash -c 'source tools/gpu-suite.sh
  for f in "$@"; do check_sanitizer_ops "$f" 0; printf "%s:%s/%s " "$(basename "$f" .log)" "$NP" "$NF"; done' _ \
  "$TMP"/flogs/san_{clean,mem,race,skip,cut}.log)
want='san_clean:2/0 san_mem:0/1 san_race:0/1 san_skip:0/1 san_cut:0/1 '
if [[ "$got" == "$want" ]]; then
  pass "gpu_suite_sanitize_ops_verdict (clean 2 passed; an error, a hazard, a skip, a cut run: failed)"
else
  fail "gpu_suite_sanitize_ops_verdict: got '$got'" "want '$want'"
fi

# The speed table from made-up runs: mnist_ddp graphs TF32 60,000 img/s, PyTorch eager 5,000 and
# compiled 30,000 (two rounds each, medians), so 12.00x eager and 2.00x compile.
runs="$TMP/speed/gpu_runs"
mkrun() {  # NAME ROUND IMG_PER_S TRAIN_S
  local d="$runs/$1-r$2"
  mkdir -p "$d"
  if [[ $1 == pt_* ]]; then
    printf '{"impl": "x", "steps": 6000, "images_per_s": %s, "train_s": %s, "top1": 0.9}\n' "$3" "$4" >"$d/stdout"
  else
    printf '{"event": "done", "steps": 6000, "images_per_s": %s, "train_s": %s, "top1": 0.91}\n' "$3" "$4" >"$d/metrics.jsonl"
  fi
  printf '%s\t%s\t0\t%s\n' "$1" "$2" "$d" >>"$runs/manifest.tsv"
}
mkdir -p "$runs"
mkrun graphs_tf32 1 50000 12; mkrun graphs_tf32 2 70000 8.57
mkrun pt_eager_tf32 1 5000 120; mkrun pt_eager_tf32 2 5000 120
mkrun pt_compiled_tf32 1 30000 20; mkrun pt_compiled_tf32 2 30000 20
printf 'eager_tf32\t1\t124\t%s\n' "$runs/eager_tf32-r1" >>"$runs/manifest.tsv"
table=$(python3 bench/gpu_table.py "$runs" 10 2 --json "$TMP/speed.json" 2>&1)
got=$(python3 -c "
import json, sys
m = json.load(open(sys.argv[1]))['median']['graphs_tf32']
print('%.2f %.2f %.0f' % (m['vs_eager'], m['vs_compile'], m['images_per_s']))" "$TMP/speed.json" 2>&1)
if [[ "$got" == "12.00 2.00 60000" ]] && grep -qE '^mnist_ddp graphs TF32 \(default\) +60000 .* 12\.00x +2\.00x' <<<"$table" &&
   grep -qE '^mnist_ddp eager TF32 +failed \(exit 124\)' <<<"$table"; then
  pass "gpu_table_medians_and_ratios_against_eager_and_compile (12.00x eager, 2.00x compile; a timed-out row says so)"
else
  fail "gpu_table: got '$got'" "$table"
fi
finish
