#!/usr/bin/env bash
# readme_test.sh — the README's first command (`make run`) works as written (with a short run
# passed through ARGS), and the README still opens with exactly the two commands.
source "$(dirname "$0")/lib.sh"
cd "$REPO"
first=$(awk '/^```sh/{f=1;next} /^```/{if(f)exit} f' README.md)
if [[ "$(echo "$first" | awk '{print $1" "$2}' | tr '\n' ';')" == "make run;make test;" ]]; then
  pass "readme_opens_with_make_run_and_make_test"
else
  fail "readme_opens_with_make_run_and_make_test" "$first"
fi
# The two commands build with one job per core unless make was given -j (a dry run: only the
# lines that start a make run, and they print the inner make's command line).
jobs=$(nproc)
if make -n run 2>/dev/null | grep -q -- "--no-print-directory -j$jobs all$" &&
   make -n -j1 run 2>/dev/null | grep -q -- "--no-print-directory  *all$" &&
   make -n JOBS=3 test 2>/dev/null | grep -q -- "--no-print-directory -j3 test-only$"; then
  pass "make_run_and_test_build_one_job_per_core_unless_given_j (-j$jobs; -j1 kept; JOBS=3 taken)"
else
  fail "make_run_and_test_parallel_build" "$(make -n run 2>&1 | grep -- all | tail -3)"
fi
run make_run 600 make run ARGS="--epochs 1 --max-steps 30 --log-dir $TMP/log --checkpoint-dir $TMP/ckpt --progress off"
if [[ $RC -eq 0 ]] && grep -qE "^# +1 +1 " "$OUT" && grep -q "done: 30 steps" "$OUT"; then
  pass "make_run_trains_on_2_ranks"
else
  fail "make_run_trains_on_2_ranks rc=$RC" "$(show)"
fi
finish
