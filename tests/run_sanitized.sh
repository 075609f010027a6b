#!/usr/bin/env bash
# run_sanitized.sh — `make test-sanitize`: the unit suite of the CPU configuration built with
# AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer on), any report fatal. Prints the
# figure it proves: tests run and sanitizer reports (must be 0). Not yet here: the MPI and
# end-to-end suites under the sanitizers and a ThreadSanitizer build (issue 14, item 1).
set -uo pipefail
cd "$(dirname "$0")/.."
log="$(mktemp /tmp/mnist_ddp_sanitize.XXXXXX)"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  timeout --kill-after=10 900 build/asan/tests/unit_tests --gtest_brief=1 --gtest_color=no >"$log" 2>&1
rc=$?
reports=$(grep -cE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$log")
ok=$(grep -oE "PASSED  \] [0-9]+" "$log" | grep -oE "[0-9]+$")
grep -E "bit-flip sweep|FAILED|ERROR: |runtime error:" "$log" | head -40
echo "sanitizers (ASan + UBSan + LSan, CPU build): unit suite ${ok:-0} tests passed, exit $rc, $reports sanitizer reports (log $log)"
[[ $rc -eq 0 && $reports -eq 0 ]]
