#!/usr/bin/env bash
# gpu-suite.sh — the GPU checks on a lent GPU machine, run from the repository root with bundle/ from
# `make bundle` (no MPI, HDF5 or oneDNN needed there; CUDA 13 cuDNN/cuBLAS/NCCL come from PyTorch's
# wheels or a toolkit: build/gpu-bundle/bin/bundle-env.sh finds them, and says which are missing):
#   tools/gpu-suite.sh first     a window's first call, <= 420 s (GPU_FIRST_BUDGET_S) under a 480 s
#                                limit: preflight; correctness (GPU unit tests, Nccl.* on 1 rank,
#                                GpuDdp.* on 2, graphs on == off bitwise, a traced NCCL run, AMP fp16
#                                and bf16 within 1 point of FP32); speed (10 epochs: mnist_ddp rows,
#                                PyTorch eager, torch.compile last); a <= 60-line summary ending in the
#                                verdict line. GPU_STEPS=name,name reruns some steps (240 s default).
#   tools/gpu-suite.sh test      nvidia-smi; GPU unit tests, then all the others; MPI tests (NCCL and
#                                GpuDdp on 1 rank, GpuDdp on 2 ranks sharing the GPU);
#                                tests/e2e/gpu_test.sh; NCCL all-reduce bandwidth (comm_bench)
#   tools/gpu-suite.sh sanitize  compute-sanitizer memcheck and racecheck on a 20-step training run,
#                                CUDA graphs off and on
#   tools/gpu-suite.sh bench     bench/gpu_compare.sh 10 (mnist_ddp against PyTorch DDP)
#   tools/gpu-suite.sh [all]     test, sanitize and bench in turn: ~30 minutes, more than one
#                                10-minute command on the lent machine; there, one stage a command
# Every step of every stage is one line of STEPS below (stage, name, cap, floor, how its log is
# counted, flags, the function that builds its command, what follows it). Each stage sets up what it
# needs by itself (unpacks the bundle, links the wrappers, copies the dataset; idempotent), fits in
# 10 minutes (each step's cap, enforced by `timeout` and shrunk to what is left of the stage's
# 540 s: tests/suite_lib.sh's suite_budget), and leaves exactly two files in the results folder
# ($OUT, else /tmp/gpu-suite; `first` leaves four, see finish_first): summary-STAGE.txt (the machine, then one line per step: PASS/FAIL,
# tests passed/failed/skipped, seconds; then the tail of each failure) and logs-STAGE.tar.gz (every
# log of the stage, checkpoints left out). Cases are counted by the rules of every other suite here
# (tests/suite_lib.sh: count_cases, and faults, under which a tests/e2e script must also print its
# `end - NAME` line). MNIST_DDP_REQUIRE_GPU=1 is always set: the C++ tests and
# gpu_test.sh fail instead of skipping without a GPU, and any skip left counts as a failure here.
# Exit status: 0 only when every step of every stage run passed with nothing skipped (suite_lib's
# tally counted no failure).
# LD_LIBRARY_PATH is never exported here: the bundle's wrappers (./mnist_ddp, build/tests/*,
# build/bench/*, mpirun) set it for the project's binaries alone, so the bundle's Debian
# libstdc++/libssl never reach python3. Open MPI: tests/mpi_env.sh, as every other launch.
# python3 needs torch (bench) and h5py + numpy (checkpoint comparisons); a missing h5py is
# installed from bundle/wheels/ when a wheel is there (pip download --only-binary=:all: h5py -d
# bundle/wheels, for that machine's Python), into bundle/pylib.
# shellcheck disable=SC2317  # functions called indirectly: the STEPS table's, step KIND
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD
RESULTS="${OUT:-/tmp/gpu-suite}"
STAGE_LIMIT=540  # seconds per stage: the lent machine's 600 s per command, minus header and packing
# suite_lib's clock (suite_budget): each stage sets its limit and start; `first` its own limit.
SUITE_LIMIT=$STAGE_LIMIT SUITE_T0=0 SUITE_RESERVE=0
export MNIST_DDP_REQUIRE_GPU=1
# The python3 with torch (the image's venv need not be first on PATH): the PyTorch oracle of the
# unit tests, the benchmark, the checkpoint comparisons and the wheel-library search all use it.
for py in "${MNIST_DDP_PYTHON:-}" /opt/torch/.venv/bin/python3 "$(command -v python3)"; do
  if [[ -n $py && -x $py ]] && "$py" -c "import torch" 2>/dev/null; then
    export MNIST_DDP_PYTHON="$py" PATH="$(dirname "$py"):$PATH"
    break
  fi
done
# shellcheck source=tests/mpi_env.sh
source tests/mpi_env.sh
# The counting rules, the tally (passed, failed, skipped, failures) and the stage's clock.
# shellcheck source=tests/suite_lib.sh
source tests/suite_lib.sh
mkdir -p "$RESULTS" || exit 1

# --- bookkeeping ----------------------------------------------------------------------------------
# Per stage: LOGS (a scratch folder archived at the end), ROWS (summary lines), FAILS (failure
# tails), SUITE_T0 and SUITE_LIMIT (suite_lib's clock); per step: counts in NP/NF/NS, and FAULTS.
# The tally of every stage run (passed, failed, skipped, failures) is suite_lib's.

# row STATUS NAME PASS FAIL SKIP SECONDS NOTE [FAULT...]: one summary line, and the step in
# suite_lib's tally ("-" counts 0): its cases, one failure more for each FAULT. A FAIL row that
# counted no failure counts one, its note the reason: every FAIL row makes the exit status 1.
row() {
  ROWS+=("$(printf '%-6s %-24s %5s %5s %5s %8s  %s' "${@:1:7}")")
  local np="$3" nf="$4" ns="$5"
  [[ $np == - ]] && np=0
  [[ $nf == - ]] && nf=0
  [[ $ns == - ]] && ns=0
  local -a reasons=("${@:8}")
  [[ $1 == FAIL ]] && ((nf == 0 && ${#reasons[@]} == 0)) && reasons=("$2: $7")
  tally "$2" "$np" "$nf" "$ns" "${reasons[@]}"
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# failure_tail KIND LOG: the lines that say what went wrong.
failure_tail() {
  case "$1" in
    gtest) { grep -E '^\[  (FAILED|SKIPPED) +\] .*\(' "$2"
             grep -B3 -A12 -E 'Failure$|^unknown file: Failure' "$2" | head -n 80
             tail -n 15 "$2"; } | awk '!seen[$0]++' | head -n 100 ;;
    tap) { awk '/^(ok|skip) - /{p=0} /^not ok - /{p=1} p || /^skip - /' "$2" | head -n 100
           tail -n 3 "$2"; } | awk '!seen[$0]++' ;;
    check_sanitizer) { grep -m 60 '^========= ' "$2"; tail -n 10 "$2"; } | awk '!seen[$0]++' ;;
    check_bench) grep -E '^   exit |^== .*failed' "$2" | awk '!seen[$0]++' | head -n 30 ;;
    *) tail -n 40 "$2" ;;
  esac
}

# failure_brief KIND LOG: at most 7 lines that say what went wrong, most telling first (the first
# stage's summary has room for 8 lines a failure: these and the heading).
failure_brief() {
  case "$1" in
    gtest) { grep -A3 -E 'Failure$' "$2" | grep -vE 'Failure$|^Failed$|^--$|^\[' | awk '!seen[$0]++' | head -n 3
             grep -m 3 -E '^\[  (FAILED|SKIPPED) +\] .*\(' "$2"
             tail -n 1 "$2"; } | awk '!seen[$0]++' | head -n 7 ;;
    # tap: each "not ok" line, then the last 3 lines of its indented details (stderr comes last).
    tap) awk 'function flush() { for (i = (k > 3 ? k - 2 : 1); i <= k; i++) print b[i]; k = 0 }
              /^not ok - /{ flush(); print; inb = 1; next }
              inb && /^    /{ b[++k] = $0; next }
              { flush(); inb = 0 }
              END { flush() }' "$2" | head -n 7 ;;
    check_speed) grep -E '^   exit [0-9]+:' "$2" | awk '!seen[$0]++' | head -n 7 ;;
    # a command: its last lines, the last one first (when the summary has room for one, that one)
    *) grep -v '^\s*$' "$2" | tail -n 7 | tac | sed '1s/^/last: /' ;;
  esac
}

# step NAME CAP KIND CMD...: runs CMD from the repository root under `timeout` (CAP seconds, or
# what suite_budget leaves of the stage if less), stdout and stderr in $LOGS/NAME.log, and records
# a row. KIND: gtest | tap:END (counted from the log by suite_lib's count_cases; a tap script must
# also end with its "end - END" line, suite_lib's faults) | cmd (the exit status) | CHECKFN (a
# function called with the log and the exit status that sets NP NF NS and may set NOTE).
# SUITE_RESERVE (seconds, default 0) is kept for the steps after this one (suite_budget). An
# argument @BUDGET@ becomes the step's budget minus 10 s (for a command that keeps its own clock
# and must stop before `timeout` kills it).
step() {
  local name="$1" budget="$2" kind="$3"; shift 3
  local log="$LOGS/$name.log" end="" t0 rc status
  if [[ $kind == tap:* ]]; then end=${kind#tap:}; kind=tap; fi
  if ! suite_budget "$budget"; then
    row FAIL "$name" - - - 0 "not run: $SUITE_BUDGET_WHY"
    FAILS+=("### $name (not run: $SUITE_BUDGET_WHY)")
    return 1
  fi
  budget=$SUITE_BUDGET
  local own=$((budget - 10))
  ((own < 1)) && own=1
  local args=("${@//@BUDGET@/$own}")
  set -- "${args[@]}"
  echo "--- $name (budget ${budget} s): $*"
  t0=$(now)
  # A session of its own: when the step ends (or times out), whatever it left behind is killed
  # with it. Inner `timeout`s put their commands in process groups of their own, which a kill of
  # the step's group would miss, and a leftover training run would share the GPU with the next
  # step. The console's descriptors (3, 4: run_first) are not passed on.
  setsid timeout --kill-after=15 "$budget" "$@" >"$log" 2>&1 </dev/null 3>&- 4>&- &
  local sid=$!
  wait "$sid"
  rc=$?
  pkill -KILL -s "$sid" 2>/dev/null || kill -KILL -- "-$sid" 2>/dev/null
  local secs
  secs=$(since "$t0")
  NP=0 NF=0 NS=0 NOTE="" FAULTS=()
  case "$kind" in
    gtest) count_cases gtest "$log"
           faults gtest "$name" "$log" "$rc"
           ((NF > 0)) && NOTE="first: $(grep -m1 -o '^\[  FAILED  \] [^ ]*' "$log" | cut -c14-)" ;;
    tap) count_cases tap "$log"
         faults tap "$name" "$log" "$rc" "$end"
         ((NF > 0)) && NOTE="first: $(grep -m1 '^not ok - ' "$log" | cut -c10-90)" ;;
    cmd) if ((rc == 0)); then NP=1; else NF=1; fi ;;
    *) "$kind" "$log" "$rc" ;;
  esac
  status=PASS
  if ((rc == 124 || rc == 137)); then
    status=FAIL NOTE="timed out after ${budget} s${NOTE:+; $NOTE}"
  elif ((rc != 0)); then
    status=FAIL NOTE="exit $rc${NOTE:+; $NOTE}"
  fi
  ((NF > 0)) && status=FAIL
  ((NS > 0)) && status=FAIL NOTE="${NOTE:+$NOTE; }$NS skipped (with MNIST_DDP_REQUIRE_GPU=1 a skip fails)"
  ((NP + NF + NS == 0)) && status=FAIL NOTE="${NOTE:+$NOTE; }ran no test"
  if ((${#FAULTS[@]})); then
    status=FAIL
    # An exit status or "ran no test" above already says why; what is left is an exit 0 without
    # the script's end line (it stopped half way, e.g. an early `exit 0`).
    ((rc == 0 && NP + NF + NS > 0)) && NOTE="${NOTE:+$NOTE; }${FAULTS[*]}"
  fi
  row "$status" "$name" "$NP" "$NF" "$NS" "$secs" "$NOTE" "${FAULTS[@]}"
  echo "    $status $NP passed, $NF failed, $NS skipped, ${secs} s${NOTE:+ ($NOTE)}"
  if [[ $status == FAIL ]]; then
    if [[ $STAGE == first ]]; then
      FAILS+=("### $name ($NOTE; full log: logs-first.tar.gz $name.log)" "$(failure_brief "$kind" "$log")")
    else
      FAILS+=("### $name ($NOTE; full log: logs-$STAGE.tar.gz $name.log)" "$(failure_tail "$kind" "$log")")
    fi
    return 1
  fi
  return 0
}

# --- setup, shared by the stages (idempotent) -----------------------------------------------------
B="$ROOT/build/gpu-bundle"
setup() {
  local log="$LOGS/setup.log" t0 why=""
  t0=$(now)
  {
    # xz-compressed; without the xz program (the GPU image may lack it), python3's tarfile unpacks it.
    if [[ ! -f bundle/bundle.tar.xz ]]; then
      why="bundle/bundle.tar.xz missing: run \`make bundle\` and carry bundle/"
    else
      local stamp
      stamp=$(stat -c '%s %Y' bundle/bundle.tar.xz)
      if [[ ! -f "$B/.unpacked" || "$(cat "$B/.unpacked")" != "$stamp" ]]; then
        rm -rf "$B.new" && mkdir -p "$B.new"
        if command -v xz >/dev/null 2>&1; then
          echo "unpacking bundle/bundle.tar.xz into $B (tar + xz)"
          tar -C "$B.new" -xJf bundle/bundle.tar.xz
        else
          echo "unpacking bundle/bundle.tar.xz into $B (no xz here: python3's tarfile)"
          python3 -c 'import sys, tarfile
kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], **kw)' \
            bundle/bundle.tar.xz "$B.new"
        fi && echo "$stamp" >"$B.new/.unpacked" && rm -rf "$B" && mv "$B.new" "$B" ||
          why="unpacking bundle/bundle.tar.xz failed (xz: $(command -v xz || echo none); python3 lzma: $(python3 -c 'import lzma; print("yes")' 2>&1 | tail -n 1))"
      fi
    fi
    if [[ -z $why && ! -f "$B/bin/bundle-env.sh" ]]; then
      why="the bundle has no bin/bundle-env.sh (made by an older tools/make-bundle.sh): make bundle again"
    fi
    if [[ -z $why ]]; then
      # Defines mnist_ddp_find_cuda; exports nothing by itself.
      # shellcheck source=/dev/null
      source "$B/bin/bundle-env.sh"
      if mnist_ddp_find_cuda 2>"$LOGS/cuda-libs.err"; then
        echo "CUDA libraries from: $MNIST_DDP_CUDA_LIBS"
      else
        why="$(cat "$LOGS/cuda-libs.err")"
      fi
    fi
    if [[ -z $why ]]; then
      # The wrappers where the scripts expect the binaries; mpirun (a wrapper too) on PATH.
      ln -sfn "$B/bin/mnist_ddp" ./mnist_ddp
      mkdir -p build/tests build/bench
      for t in unit_tests mpi_tests; do ln -sfn "$B/bin/$t" "build/tests/$t"; done
      for t in ops_bench comm_bench gpu_ops_bench gpu_conv_algos; do ln -sfn "$B/bin/$t" "build/bench/$t"; done
      if ! cmp -s bundle/data/DATASET data/dataset/DATASET 2>/dev/null ||
         [[ $(ls data/dataset/*.gz 2>/dev/null | wc -l) -lt 4 ]]; then
        rm -rf data/dataset && mkdir -p data/dataset && cp bundle/data/* data/dataset/ || why="copying bundle/data failed"
      fi
    fi
    # h5py for the checkpoint comparisons: from bundle/wheels when python3 lacks it.
    if [[ -z $why ]] && ! python3 -c "import h5py" 2>/dev/null && ls bundle/wheels/h5py-*.whl >/dev/null 2>&1; then
      python3 -m pip install --no-index --no-deps --find-links bundle/wheels --target bundle/pylib h5py &&
        echo "h5py installed from bundle/wheels into bundle/pylib"
    fi
  } >"$log" 2>&1
  if [[ -d bundle/pylib ]]; then export PYTHONPATH="$ROOT/bundle/pylib${PYTHONPATH:+:$PYTHONPATH}"; fi
  export MNIST_DDP_CUDA_LIBS PATH="$B/mpi/bin:$B/bin:$PATH"
  if [[ -n $why ]]; then
    row FAIL setup - 1 - "$(since "$t0")" "${why%%$'\n'*}"
    FAILS+=("### setup" "$why" "$(tail -n 20 "$log")")
    return 1
  fi
  row PASS setup - - - "$(since "$t0")" "bundle $(head -n 1 "$B/BUNDLE-INFO" 2>/dev/null | cut -d' ' -f3 | tr -d ,)"
  return 0
}

# header: what this ran on (GPU, driver, bundle, libraries, Python).
header() {
  echo "gpu-suite $STAGE: $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), MNIST_DDP_REQUIRE_GPU=$MNIST_DDP_REQUIRE_GPU"
  echo "GPU: $(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -n 2 | tr '\n' ' ')"
  echo "bundle: $(head -n 1 "$B/BUNDLE-INFO" 2>/dev/null || echo '(not unpacked)')"
  echo "CUDA libraries: ${MNIST_DDP_CUDA_LIBS:-(not found)}"
  echo "python3: $(tools/gpu-preflight.sh --python)"
}

# finish: writes summary-STAGE.txt and logs-STAGE.tar.gz, prints the summary.
finish() {
  local summary="$RESULTS/summary-$STAGE.txt" pass fail
  pass=$(printf '%s\n' "${ROWS[@]}" | grep -c '^PASS')
  fail=$(printf '%s\n' "${ROWS[@]}" | grep -c '^FAIL')
  {
    if [[ -n "${HEADER:-}" ]]; then echo "$HEADER"; else header; fi
    echo
    printf '%-6s %-24s %5s %5s %5s %8s  %s\n' RESULT step pass fail skip seconds note
    printf '%s\n' "${ROWS[@]}"
    echo "TOTAL $STAGE: $pass steps passed, $fail failed, $((SECONDS - SUITE_T0)) s"
    if [[ -n "${EXTRA:-}" && -f "$EXTRA" ]]; then echo; cat "$EXTRA"; fi
    if ((${#FAILS[@]})); then
      echo
      echo "--- failures"
      printf '%s\n' "${FAILS[@]}"
    fi
  } >"$summary"
  tar -C "$LOGS" --exclude='*.h5' -czf "$RESULTS/logs-$STAGE.tar.gz" . 2>/dev/null ||
    echo "warning: packing the logs into $RESULTS/logs-$STAGE.tar.gz failed" >>"$summary"
  rm -rf "$LOGS"
  echo
  cat "$summary"
}

# --- the steps: one table -------------------------------------------------------------------------
# One line a step, each stage's in the order it runs them:
#   stage  the mode that runs it: first, test, sanitize or bench (a name may recur in another)
#   step   its name: its summary row and $LOGS/NAME.log
#   cap    its budget in seconds (`timeout`; shrunk to what is left of the stage: suite_budget);
#          - for a prep step
#   floor  first: the seconds kept back for it while the steps before it run (SUITE_RESERVE), so a
#          slow step cannot crowd out the speed table, and time a step does not use passes to the
#          next; - elsewhere (nothing kept back)
#   kind   how its log is counted (step): gtest | tap:END | cmd | CHECKFN; or prep, a function run
#          in this shell that records its own row (no command, no budget)
#   flags  correct: it checks a result (the verdict's "correct"); named: first runs it only when
#          GPU_STEPS names it; nobundle: needs no bundle and no GPU (the self-tests); - none
#   run    the function that builds its command, called with the step's name: sets CMD (and may
#          set CAP, STEP_ENV, EXTRA), or records why it cannot and returns 1
#   then   what comes after it: - the next step; stop: if it fails, the rest of the stage is left
#          out; FN: a function that returns 1, with STOP_WHY, to stop the stage there
declare -A T_CAP=() T_FLOOR=() T_KIND=() T_FLAGS=() T_RUN=() T_THEN=() T_ORDER=()
load_steps() {
  local stage name cap floor kind flags run after
  while read -r stage name cap floor kind flags run after; do
    [[ -z $stage || $stage == \#* ]] && continue
    T_CAP[$stage/$name]=$cap T_FLOOR[$stage/$name]=$floor T_KIND[$stage/$name]=$kind
    T_FLAGS[$stage/$name]=$flags T_RUN[$stage/$name]=$run T_THEN[$stage/$name]=$after
    T_ORDER[$stage]+="${T_ORDER[$stage]:+ }$name"
  done
}
load_steps <<'STEPS'
# stage   step                   cap floor kind                flags                   run                      then
# first: one window's first call (run_first): correctness, then speed. sanitize_ops (compute-
# sanitizer on the kernels' unit tests, ~10-60 s), e2e_all (every gpu_test.sh case) and the self-test
# steps of tests/e2e/gpu_suite_test.sh run only when named; the self-tests need no bundle and no GPU.
first     preflight               40  15   cmd                 correct                 run_preflight            cannot_start
first     unit_gpu                45  20   gtest               correct                 run_unit_gpu             -
first     nccl_np1                30  10   gtest               correct                 run_nccl_np1             -
first     gpuddp_np2              45  15   gtest               correct                 run_gpuddp_np2           -
first     graphs_bitwise          80  20   tap:gpu_test        correct                 run_graphs_bitwise       -
first     trace_nccl              40  10   tap:gpu_test        correct                 run_trace_nccl           -
first     amp                     60  20   tap:gpu_test        correct                 run_amp                  -
first     speed_mnist_ddp        160  40   check_speed         -                       run_speed_mnist_ddp      -
first     ops_gpu                 40  15   cmd                 -                       run_ops_gpu              -
first     speed_pytorch_eager    150  60   check_speed         -                       run_speed_pytorch_eager  -
first     speed_torch_compile    150  60   check_speed         -                       run_speed_torch_compile  -
first     sanitize_ops           150  40   check_sanitizer_ops correct,named           run_sanitize_ops         -
first     e2e_all                240  60   tap:gpu_test        correct,named           run_gpu_test_all         -
first     selftest_pass           20  20   tap:selftest_pass   correct,named,nobundle  run_selftest_pass        -
first     selftest_fail           20  20   cmd                 correct,named,nobundle  run_selftest_fail        -
# test: budgets (H100, seconds): 15 + 45 + 40 + 45 + 45 + 310 + 30 = 530, + setup (<= 30) and
# packing < 600
test      gpu_info                15   -   cmd                 -                       run_gpu_info             -
test      unit_gpu                45   -   gtest               -                       run_unit_gpu             -
test      unit_others             40   -   gtest               -                       run_unit_others          -
test      mpi_np1_nccl_gpuddp     45   -   gtest               -                       run_mpi_np1_nccl_gpuddp  -
test      mpi_np2_gpuddp          45   -   gtest               -                       run_gpuddp_np2           -
test      e2e_gpu_test           310   -   tap:gpu_test        -                       run_gpu_test_all         -
test      comm_bench_nccl         30   -   check_comm_bench    -                       run_comm_bench_nccl      -
# sanitize: the GPU first (without one, nothing below can say anything), then compute-sanitizer
# and the data it runs on; budgets (seconds): probe 30, memcheck 2 x 110, racecheck 2 x 130 = 510
# (< 540 with setup)
sanitize  gpu_probe               30   -   cmd                 -                       run_gpu_probe            stop
sanitize  compute-sanitizer        -   -   prep                -                       prep_sanitizer           stop
sanitize  sanitize-data            -   -   prep                -                       prep_sanitize_data       stop
sanitize  memcheck_graphs_off    110   -   check_sanitizer     -                       run_sanitizer            -
sanitize  memcheck_graphs_on     110   -   check_sanitizer     -                       run_sanitizer            -
sanitize  racecheck_graphs_off   130   -   check_sanitizer     -                       run_sanitizer            -
sanitize  racecheck_graphs_on    130   -   check_sanitizer     -                       run_sanitizer            -
# bench: 530 s for the whole comparison; gpu_compare.sh leaves out runs that would not fit in 500
# (its rows then say so; reported, not failed) and always prints its table, copied into the summary
bench     gpu_compare            530   -   check_bench         -                       run_gpu_compare          -
STEPS
# has_flag STAGE/STEP FLAG: the table gives that step FLAG.
has_flag() { [[ ",${T_FLAGS[$1]:-}," == *",$2,"* ]]; }
# first's steps when GPU_STEPS names none: all its steps but the named-only ones.
FIRST_STEPS=()
for s in ${T_ORDER[first]}; do has_flag "first/$s" named || FIRST_STEPS+=("$s"); done
unset s

# run_row NAME: this stage's step NAME: its function builds the command, step runs and counts it.
run_row() {
  local key="$STAGE/$1" CAP CMD=() STEP_ENV=()
  CAP=${T_CAP[$key]}
  if [[ ${T_KIND[$key]} == prep ]]; then "${T_RUN[$key]}" "$1"; return; fi
  "${T_RUN[$key]}" "$1" || return 1
  # The step's own environment (PREFLIGHT_HEADER, SAN_TOOL), exported to its command and seen by
  # its CHECKFN, for this step alone.
  ((${#STEP_ENV[@]} == 0)) || local -x "${STEP_ENV[@]}"
  step "$1" "$CAP" "${T_KIND[$key]}" "${CMD[@]}"
}

# run_steps NAME...: those steps of the stage, in turn. While one runs, the floors of the steps
# after it and KEEP_S (first: 10 s to write the summary) are kept back (SUITE_RESERVE). Once a
# step's `then` stops the stage, first still gives each step asked for a row, "not run" (its
# summary answers for every one); the other stages end there.
run_steps() {
  local names=("$@") i j s f key stopped=""
  for ((i = 0; i < ${#names[@]}; i++)); do
    s=${names[i]} key="$STAGE/${names[i]}"
    if [[ -n $stopped ]]; then
      [[ $STAGE == first ]] || break
      row FAIL "$s" - - - 0 "not run: $stopped"
      continue
    fi
    SUITE_RESERVE=$KEEP_S
    for ((j = i + 1; j < ${#names[@]}; j++)); do
      f=${T_FLOOR[$STAGE/${names[j]}]}
      [[ $f == - ]] || SUITE_RESERVE=$((SUITE_RESERVE + f))
    done
    local ok=1
    run_row "$s" || ok=0
    case "${T_THEN[$key]}" in
      -) ;;
      stop) ((ok)) || stopped="$s failed" ;;
      *) STOP_WHY=""; "${T_THEN[$key]}" || stopped=$STOP_WHY ;;
    esac
  done
  SUITE_RESERVE=0
}

# The binary cannot start: nothing after it can run; the device time goes to a fixed second call.
cannot_start() {
  grep -q 'CANNOT START' "$LOGS/preflight-header.txt" 2>/dev/null || return 0
  STOP_WHY="preflight: the binary cannot start (see the preflight lines above)"
  # A failure even where preflight's own row passed.
  tally preflight 0 0 0 "$STOP_WHY"
  return 1
}

# --- the steps: their commands and checks ----------------------------------------------------------
# Each run_* function sets CMD for step; the checks (CHECKFN kinds) read a log.
# comm_bench: the NCCL rows ran and passed their data check.
check_comm_bench() {
  NF=$(grep -c 'ERROR OCCURRED' "$1")
  NP=$(($(grep -c '^BM_AllreduceNccl/' "$1") - NF))
  NS=0
  ((NF > 0)) && NOTE="$(grep -m1 -o "ERROR OCCURRED: .*" "$1")"
  ((NP == 0)) && NF=$((NF + 1)) NOTE="${NOTE:-no BM_AllreduceNccl row}"
  return 0
}

# compute-sanitizer: $COMPUTE_SANITIZER, PATH, the CUDA toolkit, or a pip wheel's copy.
find_sanitizer() {
  local c sp
  for c in "${COMPUTE_SANITIZER:-}" "$(command -v compute-sanitizer 2>/dev/null)" \
           /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer \
           $(ls -d /usr/local/cuda-*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer/compute-sanitizer 2>/dev/null | sort -rV); do
    [[ -n $c && -x $c ]] && { echo "$c"; return 0; }
  done
  for sp in $(python3 -c 'import site, sys; print("\n".join(p for p in site.getsitepackages() + sys.path if p.endswith(("site-packages", "dist-packages"))))' 2>/dev/null); do
    c=$(find "$sp/nvidia" -maxdepth 4 -name compute-sanitizer -type f -perm -u+x 2>/dev/null | head -n 1)
    [[ -n $c ]] && { echo "$c"; return 0; }
  done
  return 1
}

# check_sanitizer LOG RC: the run finished ("done: 20 steps") and every summary line says zero:
# "ERROR SUMMARY: 0 errors" (memcheck; also printed by newer racechecks) and "RACECHECK SUMMARY:
# 0 hazards displayed (0 errors, 0 warnings)" (racecheck). Anything else is a failure.
check_sanitizer() {
  local log="$1" tool="${SAN_TOOL:-memcheck}" lines bad
  lines=$(grep -E '(ERROR|RACECHECK) SUMMARY:' "$log")
  bad=$(grep -vE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' <<<"$lines" | grep -c .)
  NP=0 NF=0 NS=0
  if [[ -z $lines ]]; then
    NF=1 NOTE="no ${tool} summary line (the sanitizer did not finish)"
  elif ((bad > 0)); then
    NF=1 NOTE="$(grep -vE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' <<<"$lines" | head -n 1 | sed 's/^=* *//')"
  elif [[ $tool == memcheck ]] && ! grep -q 'ERROR SUMMARY: 0 errors' <<<"$lines"; then
    NF=1 NOTE="no 'ERROR SUMMARY: 0 errors'"
  elif ! grep -q "^done: 20 steps" "$log"; then
    NF=1 NOTE="training did not finish (no 'done: 20 steps')"
  else
    NP=1 NOTE="$(tail -n 1 <<<"$lines" | sed 's/^=* *//')"
  fi
  return 0
}

# check_sanitizer_ops LOG RC: sanitize_ops' memcheck and racecheck runs, each with its tests passed.
check_sanitizer_ops() {
  local log="$1" passed
  passed=$(grep -c '^\[  PASSED  \]' "$log")
  NP=0 NF=0 NS=0
  if ! grep -q 'ERROR SUMMARY: 0 errors' "$log"; then
    NF=1 NOTE="memcheck: $(grep -m1 'ERROR SUMMARY' "$log" | sed 's/^=* *//')"
  elif ! grep -q 'RACECHECK SUMMARY: 0 hazards' "$log"; then
    NF=1 NOTE="racecheck: $(grep -m1 'RACECHECK SUMMARY' "$log" | sed 's/^=* *//')"
  elif ((passed < 2)) || grep -qE '^\[  (FAILED|SKIPPED) +\] ' "$log"; then
    NF=1 NOTE="the tests did not all pass under both tools ($passed PASSED lines)"
  else
    NP=2 NOTE="memcheck 0 errors, racecheck 0 hazards"
  fi
  return 0
}

# check_bench LOG RC: runs that gave a result / failed / were left out for time (gpu_compare.sh's
# manifest); the table itself goes into the summary.
check_bench() {
  local m="$LOGS/bench/gpu_runs/manifest.tsv"
  NP=$(awk -F'\t' '$3 == "0"' "$m" 2>/dev/null | wc -l)
  NF=$(awk -F'\t' '$3 != "0" && $3 != "skipped"' "$m" 2>/dev/null | wc -l)
  # Runs left out for the time budget are reported, not counted as skips (the table says so).
  NS=0
  local left
  left=$(awk -F'\t' '$3 == "skipped"' "$m" 2>/dev/null | wc -l)
  ((left > 0)) && NOTE="$left runs left out for time (medians of the rest)"
  return 0
}

SPEED_EPOCHS=10

# The speed steps share one results folder; each step's rows are the manifest lines it appended.
check_speed() {
  local m="$LOGS/speed/gpu_runs/manifest.tsv"
  NP=$(tail -n +"$((SPEED_MARK + 1))" "$m" 2>/dev/null | awk -F'\t' '$3 == "0"' | wc -l)
  NF=$(tail -n +"$((SPEED_MARK + 1))" "$m" 2>/dev/null | awk -F'\t' '$3 != "0" && $3 != "skipped"' | wc -l)
  NS=0
  local left
  left=$(tail -n +"$((SPEED_MARK + 1))" "$m" 2>/dev/null | awk -F'\t' '$3 == "skipped"' | wc -l)
  ((left > 0)) && NF=$((NF + left)) NOTE="$left runs not started (time budget)"
  return 0
}
# speed_cmd VARIANTS PER_RUN_CAP: one round of those variants, 10 epochs each (check_speed counts
# the manifest lines after SPEED_MARK).
speed_cmd() {
  SPEED_MARK=$(cat "$LOGS/speed/gpu_runs/manifest.tsv" 2>/dev/null | wc -l)
  CMD=(env OUT="$LOGS/speed" GPU_COMPARE_APPEND=1 GPU_COMPARE_PEAK=0
    GPU_COMPARE_TABLE=0 GPU_COMPARE_VARIANTS="$1" GPU_COMPARE_CAP_S="$2" GPU_COMPARE_BUDGET_S=@BUDGET@
    bash bench/gpu_compare.sh "$SPEED_EPOCHS" 1)
}
# The FP32 top-1 of graphs_bitwise's one epoch, for amp's comparison (empty if it did not pass).
fp32_top1() { sed -n 's/^# fp32_top1 \([0-9.]*\)$/\1/p' "$LOGS/graphs_bitwise.log" 2>/dev/null | head -n 1; }

# The commands, in the table's order (a function shared by two stages runs the same command).
run_preflight() { STEP_ENV=(PREFLIGHT_HEADER="$LOGS/preflight-header.txt"); CMD=(bash tools/gpu-preflight.sh); }
run_unit_gpu() { CMD=(build/tests/unit_tests --gtest_color=no --gtest_filter='Gpu*'); }
run_nccl_np1() { CMD=(mpirun -np 1 build/tests/mpi_tests --gtest_color=no --gtest_filter='Nccl.*'); }
run_gpuddp_np2() { CMD=(mpirun -np 2 build/tests/mpi_tests --gtest_color=no --gtest_filter='GpuDdp.*'); }
# With --gpu-kernels own's epoch pair too (graphs == eager, top-1 against this FP32 epoch).
# shellcheck disable=SC2054  # the comma joins two case names in one word
run_graphs_bitwise() { CMD=(env GPU_TEST_CASES=graphs_one_epoch,own_kernels MNIST_DDP_E2E_KEEP="$LOGS/e2e" bash tests/e2e/gpu_test.sh); }
run_trace_nccl() { CMD=(env GPU_TEST_CASES=trace MNIST_DDP_E2E_KEEP="$LOGS/e2e" bash tests/e2e/gpu_test.sh); }
# The FP32 reference is graphs_bitwise's when it ran (empty if it failed: amp then says so
# rather than spend its budget on two more FP32 epochs); alone, amp runs that epoch itself, so
# its cap is 90 s instead of the table's 60.
run_amp() {
  if [[ " ${SELECTED[*]} " == *" graphs_bitwise "* ]]; then
    CMD=(env GPU_TEST_CASES=amp GPU_TEST_FP32_TOP1="$(fp32_top1)" MNIST_DDP_E2E_KEEP="$LOGS/e2e" bash tests/e2e/gpu_test.sh)
  else
    CAP=90
    CMD=(env GPU_TEST_CASES=amp MNIST_DDP_E2E_KEEP="$LOGS/e2e" bash tests/e2e/gpu_test.sh)
  fi
  # The command is built: an empty fp32_top1 (graphs_bitwise failed) is amp's to report, and its
  # exit status must not read as "could not build" (run_row).
  return 0
}
# graphs_fp32 (--tf32 off): the top-1 target is against the CPU run, which is full FP32.
run_speed_mnist_ddp() { speed_cmd graphs_tf32,graphs_tf32_own,eager_tf32,graphs_fp32,graphs_amp_bf16,graphs_amp_fp16 60; }
# Where a step's device time goes: each op at batch 100 (bench/gpu_ops_bench.cpp), then every
# cuDNN algorithm of each convolution timed (bench/gpu_conv_algos.cu); both in the logs.
run_ops_gpu() { CMD=(bash -c 'build/bench/gpu_ops_bench --benchmark_color=false --benchmark_min_time=0.002 && build/bench/gpu_conv_algos'); }
run_speed_pytorch_eager() { speed_cmd pt_eager_tf32,pt_eager_amp_bf16 90; }
# torch.compile last and capped: its compilation may take minutes on a cold cache.
run_speed_torch_compile() { speed_cmd pt_compiled_tf32 150; }
# Only when named: compute-sanitizer memcheck, then racecheck, on the GpuOps unit tests of the
# convolutions and BN (each kernel on its own, odd shapes included: out-of-bounds and shared-
# memory hazards that a training run's shapes would not reach).
run_sanitize_ops() {
  local cs
  if ! cs=$(find_sanitizer); then
    row FAIL sanitize_ops - 1 - 0 "compute-sanitizer not found"
    FAILS+=("### sanitize_ops" "compute-sanitizer was not found (set COMPUTE_SANITIZER)")
    return 1
  fi
  # shellcheck disable=SC2016  # $CS and $t expand in the inner bash
  CMD=(env CS="$cs" bash -c 'for t in memcheck racecheck; do
                      "$CS" --tool "$t" --error-exitcode 99 --print-limit 50 --target-processes all build/tests/unit_tests \
                        --gtest_color=no --gtest_filter="GpuOps.ConvolutionsMatchCpu:GpuOps.BatchNormReluPoolMatchCpu:GpuOps.OwnWeightGradientMatchesExactWithinTf32Model"; done')
}
# Every case of tests/e2e/gpu_test.sh (first's e2e_all, only when named: resume GPU->GPU and
# GPU->CPU->GPU bitwise, capture failure, accumulation, overlap, SyncBN, AMP resume, ...;
# ~70-100 s; the test stage's e2e_gpu_test).
run_gpu_test_all() { CMD=(env MNIST_DDP_E2E_KEEP="$LOGS/e2e" bash tests/e2e/gpu_test.sh); }
# The harness's own checks (tests/e2e/gpu_suite_test.sh): a passing tap step, which like every
# tests/e2e script ends with its end line, and a failing command with a long tail.
run_selftest_pass() { CMD=(bash -c 'echo "ok - selftest_pass (the harness runs a step)"; echo "end - selftest_pass"'); }
run_selftest_fail() { CMD=(bash -c 'for i in $(seq 1 30); do echo "selftest failure line $i"; done; exit 3'); }

run_gpu_info() { CMD=(nvidia-smi); }
run_unit_others() { CMD=(build/tests/unit_tests --gtest_color=no --gtest_filter='-Gpu*'); }
run_mpi_np1_nccl_gpuddp() { CMD=(mpirun -np 1 build/tests/mpi_tests --gtest_color=no --gtest_filter='Nccl.*:GpuDdp.SharedGpu*'); }
run_comm_bench_nccl() { CMD=(mpirun -np 1 build/bench/comm_bench --benchmark_filter=Nccl --benchmark_color=false); }

run_gpu_probe() { CMD=(./mnist_ddp --device cuda --print-env); }
# compute-sanitizer (SAN_CS for the runs below) and its row; without it the stage stops here.
prep_sanitizer() {
  if ! SAN_CS=$(find_sanitizer); then
    row FAIL compute-sanitizer - 1 - 0 "not found (PATH, /usr/local/cuda*/bin, site-packages/nvidia/*): install the CUDA 13 toolkit's compute-sanitizer or set COMPUTE_SANITIZER"
    FAILS+=("### compute-sanitizer" "compute-sanitizer was not found: the sanitize stage needs the CUDA toolkit's (or set COMPUTE_SANITIZER=/path/to/compute-sanitizer)")
    return 1
  fi
  echo "compute-sanitizer: $SAN_CS ($("$SAN_CS" --version 2>/dev/null | grep -m1 -i version))" >"$LOGS/sanitizer-version.txt"
  row PASS compute-sanitizer - - - 0 "$SAN_CS"
}
# The run's own data (SAN_DATA): the full training set, the first 1000 test images (the final
# evaluation under the sanitizer is the slow part). A row only when it fails.
prep_sanitize_data() {
  SAN_DATA="$ROOT/bundle/sanitize-data"
  local sd="$SAN_DATA"
  if ! cmp -s "$sd/SOURCE" data/dataset/DATASET; then
    rm -rf "$sd" && mkdir -p "$sd" && python3 - "$ROOT/data/dataset" "$sd" <<'PY' && cp data/dataset/DATASET "$sd/SOURCE"
import gzip, os, shutil, struct, sys
src, dst = sys.argv[1:3]
def read(name):
    p = os.path.join(src, name + ".gz")
    return gzip.open(p).read() if os.path.exists(p) else open(os.path.join(src, name), "rb").read()
for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
    shutil.copy(os.path.join(src, name + ".gz"), os.path.join(dst, name + ".gz"))
n = 1000
img, lab = read("t10k-images-idx3-ubyte"), read("t10k-labels-idx1-ubyte")
rows, cols = struct.unpack(">II", img[8:16])
open(os.path.join(dst, "t10k-images-idx3-ubyte"), "wb").write(img[:4] + struct.pack(">III", n, rows, cols) + img[16:16 + n * rows * cols])
open(os.path.join(dst, "t10k-labels-idx1-ubyte"), "wb").write(lab[:4] + struct.pack(">I", n) + lab[8:8 + n])
open(os.path.join(dst, "DATASET"), "w").write(open(os.path.join(src, "DATASET")).read().strip() + f" (test set cut to {n} for compute-sanitizer)\n")
PY
  fi
  if [[ ! -f "$sd/SOURCE" ]]; then
    row FAIL sanitize-data - 1 - 0 "cutting the test set into $sd failed"
    FAILS+=("### sanitize-data" "python3 could not write $sd from data/dataset")
    return 1
  fi
}
# NAME is TOOL_graphs_ON/OFF: a 20-step training run under that compute-sanitizer tool.
run_sanitizer() {
  local tool="${1%%_*}" g="${1##*_}"
  STEP_ENV=(SAN_TOOL="$tool")
  CMD=("$SAN_CS" --tool "$tool" --error-exitcode 99 --print-limit 100 --target-processes all --report-api-errors no
    ./mnist_ddp --device cuda --data "$SAN_DATA" --epochs 1 --max-steps 20 --cuda-graphs "$g" --progress off
    --log-dir "$LOGS/${tool}_graphs_$g" --checkpoint-dir "$LOGS/${tool}_graphs_$g/ckpt")
}

run_gpu_compare() {
  EXTRA="$LOGS/bench/gpu_compare.txt"
  CMD=(env OUT="$LOGS/bench" GPU_COMPARE_BUDGET_S=500 bash bench/gpu_compare.sh 10)
}

# The table's functions exist and its kinds are known: a typo fails here on any machine (and in
# tests/e2e/gpu_suite_test.sh, which sources this file), not on the lent GPU.
check_steps() {
  local k bad=""
  for k in "${!T_RUN[@]}"; do
    declare -F "${T_RUN[$k]}" >/dev/null || bad+=" $k:run=${T_RUN[$k]}"
    case "${T_KIND[$k]}" in
      gtest | tap:?* | cmd | prep) ;;
      *) declare -F "${T_KIND[$k]}" >/dev/null || bad+=" $k:kind=${T_KIND[$k]}" ;;
    esac
    case "${T_THEN[$k]}" in
      - | stop) ;;
      *) declare -F "${T_THEN[$k]}" >/dev/null || bad+=" $k:then=${T_THEN[$k]}" ;;
    esac
    [[ ${T_CAP[$k]} =~ ^[0-9]+$ || (${T_KIND[$k]} == prep && ${T_CAP[$k]} == -) ]] || bad+=" $k:cap=${T_CAP[$k]}"
    [[ ${T_FLOOR[$k]} =~ ^([0-9]+|-)$ ]] || bad+=" $k:floor=${T_FLOOR[$k]}"
  done
  [[ -z $bad ]] || { echo "gpu-suite: bad STEPS rows:$bad" >&2; return 1; }
}

# --- stage first: one window's first call -------------------------------------------------------
# Correctness, then speed, in one command of at most GPU_FIRST_BUDGET_S seconds (default 420, 240
# with GPU_STEPS) run under a 480-second limit. Each step has a cap and a floor (the table): while a
# step runs, the floors of the steps after it are kept back (SUITE_RESERVE), so a slow step cannot
# crowd out the speed table, and time a step does not use passes to the next. GPU_STEPS=name,name
# runs only those, in that order.

# finish_first: the summary (at most 60 lines, the verdict last), the speed table as JSON, the
# logs; prints the summary last, so the tail of the command's output always holds it.
finish_first() {
  local summary="$RESULTS/summary-first.txt" json="$RESULTS/speed-first.json" table="" r
  local correct=yes verdict_s="-" verdict_eager="-" verdict_compile="-"
  if [[ -s "$LOGS/speed/gpu_runs/manifest.tsv" ]]; then
    table=$(timeout 30 python3 bench/gpu_table.py "$LOGS/speed/gpu_runs" "$SPEED_EPOCHS" 1 --json "$json" 2>&1)
    read -r verdict_s verdict_eager verdict_compile < <(timeout 10 python3 - "$json" <<'PY' 2>/dev/null
import json, sys
m = json.load(open(sys.argv[1]))["median"].get("graphs_tf32", {})
f = lambda v, fmt: fmt % v if isinstance(v, (int, float)) else "-"
print(f(m.get("train_s"), "%.2f"), f(m.get("vs_eager"), "%.1f"), f(m.get("vs_compile"), "%.2f"))
PY
    )
  fi
  local checked=0
  for r in "${ROWS[@]}"; do
    read -r status name _ <<<"$r"
    # The table's correct steps (the self-tests among them) and setup.
    [[ $name == setup ]] || has_flag "first/$name" correct || continue
    [[ $name == setup ]] || checked=1
    [[ $status == PASS ]] || correct=no
  done
  # Only speed steps named: nothing was checked, so the verdict does not claim it.
  [[ $checked == 1 || $correct == no ]] || correct="-"
  local verdict="first light: correct $correct; $SPEED_EPOCHS epochs ${verdict_s:--} s; ${verdict_eager:--}x eager; ${verdict_compile:--}x compile"
  {
    echo "gpu-suite first: $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), budget ${SUITE_LIMIT} s${GPU_STEPS:+, GPU_STEPS=$GPU_STEPS}"
    # The machine and library lines (at most 5), the CUDA library lines, the binary's verdict.
    local h="$LOGS/preflight-header.txt"
    { head -n 5 "$h"; grep 'CUDA libraries' "$h" | head -n 3; grep -m1 '^mnist_ddp --device cuda --print-env' "$h"; } 2>/dev/null |
      awk '!seen[$0]++'
    echo
    printf '%-6s %-24s %5s %5s %5s %8s  %s\n' RESULT step pass fail skip seconds note
    printf '%s\n' "${ROWS[@]}" | cut -c1-200
    echo "TOTAL first: $(printf '%s\n' "${ROWS[@]}" | grep -c '^PASS') steps passed, $(printf '%s\n' "${ROWS[@]}" | grep -c '^FAIL') failed, $((SECONDS - SUITE_T0)) s"
  } >"$summary.head"
  {
    if [[ -n $table ]]; then
      echo
      echo "--- speed ($SPEED_EPOCHS epochs, one round; JSON: speed-first.json)"
      echo "$table" | cut -c1-200 | head -n 16
    fi
  } >"$summary.table"
  # The failures get the lines left under 60: at most 8 each (their heading and last lines).
  local used avail n each
  used=$(($(wc -l <"$summary.head") + $(wc -l <"$summary.table") + 3))
  avail=$((60 - used))
  n=0
  for ((i = 0; i < ${#FAILS[@]}; i++)); do [[ ${FAILS[i]} == "### "* ]] && n=$((n + 1)); done
  {
    if ((n > 0 && avail > 2)); then
      echo
      echo "--- failures (what each says; full logs: logs-first.tar.gz)"
      each=$(((avail - 2) / n))
      ((each > 8)) && each=8
      ((each < 1)) && each=1
      local head body
      for ((i = 0; i < ${#FAILS[@]}; i++)); do
        [[ ${FAILS[i]} == "### "* ]] || continue
        head=${FAILS[i]} body=""
        [[ $((i + 1)) -lt ${#FAILS[@]} && ${FAILS[i + 1]} != "### "* ]] && body=${FAILS[i + 1]}
        echo "${head:0:200}"
        ((each > 1)) && [[ -n $body ]] && grep -v '^\s*$' <<<"$body" | head -n $((each - 1)) | cut -c1-200
      done | head -n $((avail - 2))
    fi
  } >"$summary.fail"
  cat "$summary.head" "$summary.fail" "$summary.table" >"$summary"
  echo >>"$summary"
  echo "$verdict" >>"$summary"
  rm -f "$summary.head" "$summary.fail" "$summary.table"
  tar -C "$LOGS" --exclude='*.h5' --exclude='*.json.gz' -czf "$RESULTS/logs-first.tar.gz" . 2>/dev/null ||
    echo "warning: packing the logs into $RESULTS/logs-first.tar.gz failed" >&2
  rm -rf "$LOGS"
  # "correct no" needs a FAIL row, which suite_lib's tally has counted: the exit status is 1.
  echo
  cat "$summary"
}

run_first() {
  STAGE=first KEEP_S=10
  local budget_default=420
  SELECTED=("${FIRST_STEPS[@]}")
  if [[ -n "${GPU_STEPS:-}" ]]; then
    IFS=', ' read -r -a SELECTED <<<"$GPU_STEPS"
    budget_default=240
    local s
    for s in "${SELECTED[@]}"; do
      if [[ -z "${T_RUN[first/$s]:-}" ]]; then
        echo "gpu-suite first: unknown step '$s' in GPU_STEPS (steps: ${FIRST_STEPS[*]})" >&2
        exit 2
      fi
    done
  fi
  # The stage's own clock: the whole command, setup included, minus ~10 s to pack and print.
  SUITE_LIMIT=$((${GPU_FIRST_BUDGET_S:-$budget_default} - 10))
  LOGS="$(mktemp -d /tmp/gpu-suite-first.XXXXXX)"
  # The clock starts with the script (python's torch import above counts too).
  ROWS=() FAILS=() SUITE_T0=0
  # The console, also as a file in $OUT (the reply shows only the tail of the output).
  exec 3>&1 4>&2 > >(tee "$RESULTS/console-first.txt") 2>&1
  local tee_pid=$!
  echo "=== gpu-suite first (results: $RESULTS; budget ${SUITE_LIMIT} s; steps: ${SELECTED[*]})"
  local needs_bundle=0 s
  for s in "${SELECTED[@]}"; do has_flag "first/$s" nobundle || needs_bundle=1; done
  if ((needs_bundle == 0)) || setup; then
    run_steps "${SELECTED[@]}"
  else
    for s in "${SELECTED[@]}"; do row FAIL "$s" - - - 0 "not run: setup failed"; done
  fi
  finish_first
  # Back to the real output, and tee flushed before the script exits (the verdict is its last line).
  exec 1>&3 2>&4 3>&- 4>&-
  wait "$tee_pid" 2>/dev/null
}

run_stage() {
  STAGE="$1" KEEP_S=0 SUITE_LIMIT=$STAGE_LIMIT
  LOGS="$(mktemp -d "/tmp/gpu-suite-$STAGE.XXXXXX")"
  ROWS=() FAILS=() EXTRA="" HEADER="" SUITE_T0=$SECONDS
  echo "=== gpu-suite $STAGE (results: $RESULTS)"
  if setup; then
    HEADER="$(header)"  # now, not after a stage that used its whole budget
    # shellcheck disable=SC2086  # the table's step names, one word each
    run_steps ${T_ORDER[$STAGE]}
  fi
  finish
}

check_steps || exit 2
# Sourced (tests/e2e/gpu_suite_test.sh reads its helpers): define, run nothing.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0
case "${1:-all}" in
  first) run_first; exit $((failed > 0)) ;;  # the verdict stays the last line printed
  test | sanitize | bench) run_stage "$1" ;;
  all) for s in test sanitize bench; do run_stage "$s"; done ;;
  *) echo "usage: tools/gpu-suite.sh [first|test|sanitize|bench|all]  (GPU_STEPS=name,name with first)" >&2; exit 2 ;;
esac
echo
echo "results: $(ls -d "$RESULTS"/summary-*.txt "$RESULTS"/logs-*.tar.gz 2>/dev/null | tr '\n' ' ')"
exit $((failed > 0))
