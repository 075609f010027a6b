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
run make_run 600 make run ARGS="--epochs 1 --max-steps 30 --log-dir $TMP/log --checkpoint-dir $TMP/ckpt --progress off"
if [[ $RC -eq 0 ]] && grep -qE "^# +1 +1 " "$OUT" && grep -q "done: 30 steps" "$OUT"; then
  pass "make_run_trains_on_2_ranks"
else
  fail "make_run_trains_on_2_ranks rc=$RC" "$(show)"
fi
finish
