#!/usr/bin/env bash
# run_fuzz.sh SECONDS [TARGET...] — `make fuzz`: runs each libFuzzer target (default: idx
# checkpoint cli env; build/fuzz/fuzz/fuzz_TARGET) for SECONDS on a copy of its committed corpus
# (tests/fuzz/corpus/NAME; checkpoint_hostile shares checkpoint's), the seeds and every crash
# found so far, which it first replays), with its dictionary where there is one. Limits that
# turn the contract into crashes: 10 s per input (a hang), 1 GiB per allocation and 2 GiB RSS (a
# huge allocation). Prints executions and crashes per target; exits non-zero on any crash, with
# the crashing input under the log directory (add it to the corpus when the bug is fixed).
set -uo pipefail
cd "$(dirname "$0")/../.."
SECONDS_EACH="${1:-60}"
shift || true
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(idx checkpoint cli env)
LOG="$(mktemp -d /tmp/mnist_ddp_fuzz.XXXXXX)"
# Only the fuzzers' own findings are wanted: no leak report of Open MPI's unfreed init state
# (nothing here calls MPI_Init, but the libraries are loaded).
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
total_crashes=0
total_execs=0
for name in "${TARGETS[@]}"; do
  bin="build/fuzz/fuzz/fuzz_$name"
  corpus="${name%_hostile}"
  work="$LOG/corpus-$name"
  mkdir -p "$work"
  cp tests/fuzz/corpus/"$corpus"/* "$work"/
  dict=()
  [[ -f "tests/fuzz/$corpus.dict" ]] && dict=(-dict="tests/fuzz/$corpus.dict")
  timeout --kill-after=10 $((SECONDS_EACH + 120)) "$bin" "$work" "${dict[@]}" \
    -max_total_time="$SECONDS_EACH" -timeout=10 -malloc_limit_mb=1024 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$LOG/$name-" >"$LOG/$name.log" 2>&1
  rc=$?
  execs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$LOG/$name.log" | grep -oE "[0-9]+$")
  crashes=$(find "$LOG" -maxdepth 1 -name "$name-*" | wc -l)
  if [[ $rc -ne 0 && $crashes -eq 0 ]]; then crashes=1; fi  # died without leaving its input
  seeds=$(ls tests/fuzz/corpus/"$corpus" | wc -l)
  printf "fuzz %-10s %9s executions in %s s, %d seeds, corpus now %d, %d crashes%s\n" \
    "$name" "${execs:-?}" "$SECONDS_EACH" "$seeds" "$(ls "$work" | wc -l)" "$crashes" \
    "$( ((crashes)) && echo " (log $LOG/$name.log)")"
  if ((crashes)); then grep -E "ERROR|SUMMARY|fuzz contract|Test unit written" "$LOG/$name.log" | head -8; fi
  total_crashes=$((total_crashes + crashes))
  total_execs=$((total_execs + ${execs:-0}))
done
echo "fuzzing: ${#TARGETS[@]} targets, $total_execs executions, $total_crashes crashes (logs $LOG)"
((total_crashes == 0))
