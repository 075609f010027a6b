#!/usr/bin/env bash
# run_sanitized.sh — `make test-sanitize`: the CPU configuration under the sanitizers.
#   asan: AddressSanitizer + UndefinedBehaviorSanitizer (build/asan, clang): the unit suite and the MPI
#         suite at -np 2 and -np 4 (+ LeakSanitizer), and the end-to-end scripts that run the
#         binary, data_parallel_test.sh included.
#   tsan: ThreadSanitizer (build/tsan): the flight recorder's unit tests (the unit code that starts
#         threads), the MPI suite and tests/sanitizers/threads_test.sh
#         (communication thread, watchdog thread, signal path), over Open MPI's ob1/vader transport.
# Every report goes to a file under the log directory (so the tests' own stderr checks are
# untouched) and any report fails the run. Suppressions name third-party code only:
# tests/sanitizers/{lsan,tsan}.supp. Prints the figure it proves: tests run, reports (must be 0).
set -uo pipefail
cd "$(dirname "$0")/.."
mode="${1:?usage: tests/run_sanitized.sh asan|tsan}"
source tests/mpi_env.sh
LOG="$(mktemp -d "/tmp/mnist_ddp_sanitize_$mode.XXXXXX")"
REPORTS="$LOG/reports"
mkdir -p "$REPORTS"
source tests/suite_lib.sh
# One BLAS/OpenMP thread per rank: the threads under test are ours, not OpenBLAS's pool.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# The sanitizers slow everything 2-10x: the suites get longer limits.
export SUITE_TIMEOUT=900

case "$mode" in
  asan)
    B=build/asan
    export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$REPORTS/ubsan"
    # The unit suite never starts MPI: the fast unwinder (the slow one costs it 40 s).
    export ASAN_OPTIONS="detect_leaks=1:log_path=$REPORTS/asan"
    gtest unit $B/tests/unit_tests
    # fast_unwind_on_malloc=0: Open MPI is built without frame pointers, so only the slow
    # unwinder sees the MPI_Init frames the LeakSanitizer suppressions match.
    export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0:log_path=$REPORTS/asan"
    gtest mpi_np2 mpirun -np 2 $B/tests/mpi_tests
    gtest mpi_np4 mpirun -np 4 --oversubscribe $B/tests/mpi_tests
    export MNIST_DDP_BIN="$PWD/$B/mnist_ddp"
    # LeakSanitizer stays on the unit and MPI suites above (every allocation path of the
    # library, clean exits). In the ~150 launches below it is off: matching Open MPI's leaks to
    # the suppressions needs the slow unwinder, +1.3 s a launch; ASan and UBSan stay on.
    export ASAN_OPTIONS="detect_leaks=0:log_path=$REPORTS/asan"
    # The scripts that drive the binary (not the benchmark, README, module, plot or GPU ones; not
    # the resume matrix either: its schedules are unit-tested here, its launches cost CI a minute;
    # not train_test: its epoch to an accuracy bar is the training loop that checkpoint_test and
    # the unit and MPI suites run here, and it cost CI 70 s under ASan).
    for t in bad_input launcher checkpoint failure model_io data_parallel; do
      shell "tests/e2e/${t}_test.sh"
    done
    label="ASan + UBSan + LSan"
    ;;
  tsan)
    B=build/tsan
    export MNIST_DDP_MPI_PML=ob1
    source tests/mpi_env.sh
    export TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:log_path=$REPORTS/tsan:suppressions=$PWD/tests/sanitizers/tsan.supp"
    gtest unit $B/tests/unit_tests
    gtest mpi_np2 mpirun -np 2 $B/tests/mpi_tests
    gtest mpi_np4 mpirun -np 4 --oversubscribe $B/tests/mpi_tests
    export MNIST_DDP_BIN="$PWD/$B/mnist_ddp"
    shell tests/sanitizers/threads_test.sh
    label="TSan"
    ;;
  *) echo "run_sanitized.sh: unknown mode '$mode' (asan or tsan)" >&2; exit 2 ;;
esac

# A report is a file the sanitizer wrote; a file holding only a note about suppressions is not.
reports=0
for f in "$REPORTS"/*; do
  [[ -f "$f" ]] || continue
  pattern="(ERROR|WARNING|FATAL): [A-Za-z]*Sanitizer|runtime error:"
  if grep -qE "$pattern" "$f"; then
    reports=$((reports + $(grep -cE "$pattern" "$f")))
    echo "--- sanitizer report $f"; head -40 "$f"
  fi
done
echo
print_skips
if ((${#failures[@]})); then printf 'FAILED: %s\n' "${failures[@]}"; fi
echo "sanitizers ($label, CPU build): $passed passed, $failed failed, $skipped skipped; $reports sanitizer reports (logs $LOG)"
((failed == 0 && reports == 0))
