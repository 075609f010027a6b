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
# Each stage sets up what it needs by itself (unpacks the bundle, links the wrappers, copies the
# dataset; idempotent), fits in 10 minutes (the per-step budgets below, enforced by `timeout` and
# shrunk to what is left of the stage's 540 s), and leaves exactly two files in the results folder
# ($OUT, else /tmp/gpu-suite; `first` leaves four, see finish_first): summary-STAGE.txt (the machine, then one line per step: PASS/FAIL,
# tests passed/failed/skipped, seconds; then the tail of each failure) and logs-STAGE.tar.gz (every
# log of the stage, checkpoints left out). MNIST_DDP_REQUIRE_GPU=1 is always set: the C++ tests and
# gpu_test.sh fail instead of skipping without a GPU, and any skip left counts as a failure here.
# Exit status: 0 only when every step of every stage run passed with nothing skipped.
# LD_LIBRARY_PATH is never exported here: the bundle's wrappers (./mnist_ddp, build/tests/*,
# build/bench/*, mpirun) set it for the project's binaries alone, so the bundle's Debian
# libstdc++/libssl never reach python3. Open MPI: tests/mpi_env.sh, as every other launch.
# python3 needs torch (bench) and h5py + numpy (checkpoint comparisons); a missing h5py is
# installed from bundle/wheels/ when a wheel is there (pip download --only-binary=:all: h5py -d
# bundle/wheels, for that machine's Python), into bundle/pylib.
# shellcheck disable=SC2317  # functions called indirectly: "stage_$STAGE", step KIND
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD
RESULTS="${OUT:-/tmp/gpu-suite}"
STAGE_LIMIT=540  # seconds per stage: the lent machine's 600 s per command, minus header and packing
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
mkdir -p "$RESULTS" || exit 1

# --- bookkeeping ----------------------------------------------------------------------------------
# Per stage: LOGS (a scratch folder archived at the end), ROWS (summary lines), FAILS (failure
# tails), STAGE_T0; per step: counts in NP/NF/NS.
row() { ROWS+=("$(printf '%-6s %-24s %5s %5s %5s %8s  %s' "$@")"); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# count_gtest LOG: NP NF NS from GoogleTest's per-test lines (rank 0 prints for mpi_tests).
count_gtest() {
  NP=$(grep -c '^\[       OK \] ' "$1")
  NF=$(grep -c '^\[  FAILED  \] .*([0-9]* ms)$' "$1")
  NS=$(grep -c '^\[  SKIPPED \] .*([0-9]* ms)$' "$1")
}
# count_tap LOG: NP NF NS from ok / not ok / skip lines (tests/e2e style).
count_tap() {
  NP=$(grep -c '^ok - ' "$1")
  NF=$(grep -c '^not ok - ' "$1")
  NS=$(grep -c '^skip - ' "$1")
}
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

# step NAME BUDGET KIND CMD...: runs CMD from the repository root under `timeout` (BUDGET seconds,
# or what is left of the stage if less), stdout and stderr in $LOGS/NAME.log, and records a row.
# KIND: gtest | tap (counted from the log) | cmd (the exit status) | CHECKFN (a function called
# with the log and the exit status that sets NP NF NS and may set NOTE).
# RESERVE (seconds, default 0) is kept for the steps after this one: the budget is what is left of
# the stage minus RESERVE, if less. An argument @BUDGET@ becomes the step's budget minus 10 s (for a
# command that keeps its own clock and must stop before `timeout` kills it).
step() {
  local name="$1" budget="$2" kind="$3"; shift 3
  local log="$LOGS/$name.log" left t0 rc status
  left=$((STAGE_LIMIT - (SECONDS - STAGE_T0) - ${RESERVE:-0}))
  if ((left < 10)); then
    local why="the stage's ${STAGE_LIMIT} s are used up"
    ((${RESERVE:-0} > 0)) && why="$((left + RESERVE)) s left of the stage's ${STAGE_LIMIT}, ${RESERVE} kept for the steps after it"
    row FAIL "$name" - - - 0 "not run: $why"
    FAILS+=("### $name (not run: $why)")
    FAILED=1
    return 1
  fi
  ((budget > left)) && budget=$left
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
  NP=0 NF=0 NS=0 NOTE=""
  case "$kind" in
    gtest) count_gtest "$log"
           ((NF > 0)) && NOTE="first: $(grep -m1 -o '^\[  FAILED  \] [^ ]*' "$log" | cut -c14-)" ;;
    tap) count_tap "$log"
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
  row "$status" "$name" "$NP" "$NF" "$NS" "$secs" "$NOTE"
  echo "    $status $NP passed, $NF failed, $NS skipped, ${secs} s${NOTE:+ ($NOTE)}"
  if [[ $status == FAIL ]]; then
    FAILED=1
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
    FAILED=1
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
    echo "TOTAL $STAGE: $pass steps passed, $fail failed, $((SECONDS - STAGE_T0)) s"
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

# --- stages ---------------------------------------------------------------------------------------
# comm_bench: the NCCL rows ran and passed their data check.
check_comm_bench() {
  NF=$(grep -c 'ERROR OCCURRED' "$1")
  NP=$(($(grep -c '^BM_AllreduceNccl/' "$1") - NF))
  NS=0
  ((NF > 0)) && NOTE="$(grep -m1 -o "ERROR OCCURRED: .*" "$1")"
  ((NP == 0)) && NF=$((NF + 1)) NOTE="${NOTE:-no BM_AllreduceNccl row}"
  return 0
}

stage_test() {
  # budgets (H100, seconds): 15 + 45 + 40 + 45 + 45 + 310 + 30 = 530, + setup (<= 30) and packing < 600
  step gpu_info 15 cmd nvidia-smi
  step unit_gpu 45 gtest build/tests/unit_tests --gtest_color=no --gtest_filter='Gpu*'
  step unit_others 40 gtest build/tests/unit_tests --gtest_color=no --gtest_filter='-Gpu*'
  step mpi_np1_nccl_gpuddp 45 gtest mpirun -np 1 build/tests/mpi_tests --gtest_color=no --gtest_filter='Nccl.*:GpuDdp.SharedGpu*'
  step mpi_np2_gpuddp 45 gtest mpirun -np 2 build/tests/mpi_tests --gtest_color=no --gtest_filter='GpuDdp.*'
  step e2e_gpu_test 310 tap env MNIST_DDP_E2E_KEEP="$LOGS/e2e" bash tests/e2e/gpu_test.sh
  step comm_bench_nccl 30 check_comm_bench mpirun -np 1 build/bench/comm_bench --benchmark_filter=Nccl --benchmark_color=false
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

stage_sanitize() {
  local cs
  # The GPU first: without one, nothing below can say anything.
  step gpu_probe 30 cmd ./mnist_ddp --device cuda --print-env || return
  if ! cs=$(find_sanitizer); then
    row FAIL compute-sanitizer - 1 - 0 "not found (PATH, /usr/local/cuda*/bin, site-packages/nvidia/*): install the CUDA 13 toolkit's compute-sanitizer or set COMPUTE_SANITIZER"
    FAILS+=("### compute-sanitizer" "compute-sanitizer was not found: the sanitize stage needs the CUDA toolkit's (or set COMPUTE_SANITIZER=/path/to/compute-sanitizer)")
    FAILED=1
    return
  fi
  echo "compute-sanitizer: $cs ($("$cs" --version 2>/dev/null | grep -m1 -i version))" >"$LOGS/sanitizer-version.txt"
  row PASS compute-sanitizer - - - 0 "$cs"
  # The run's own data: the full training set, the first 1000 test images (the final evaluation
  # under the sanitizer is the slow part).
  local sd="$ROOT/bundle/sanitize-data"
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
    FAILED=1
    return
  fi
  # budgets (seconds): probe 30, memcheck 2 x 110, racecheck 2 x 130 = 510 (< 540 with setup)
  local tool g
  for tool in memcheck racecheck; do
    for g in off on; do
      SAN_TOOL=$tool step "${tool}_graphs_$g" "$([[ $tool == memcheck ]] && echo 110 || echo 130)" check_sanitizer \
        "$cs" --tool "$tool" --error-exitcode 99 --print-limit 100 --target-processes all --report-api-errors no \
        ./mnist_ddp --device cuda --data "$sd" --epochs 1 --max-steps 20 --cuda-graphs "$g" --progress off \
        --log-dir "$LOGS/${tool}_graphs_$g" --checkpoint-dir "$LOGS/${tool}_graphs_$g/ckpt"
    done
  done
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

stage_bench() {
  # budget: 530 s for the whole comparison; gpu_compare.sh leaves out runs that would not fit in
  # 500 (its rows then say so; reported, not failed) and always prints its table, copied into the
  # summary.
  EXTRA="$LOGS/bench/gpu_compare.txt"
  step gpu_compare 530 check_bench env OUT="$LOGS/bench" GPU_COMPARE_BUDGET_S=500 bash bench/gpu_compare.sh 10
}

# --- stage first: one window's first call -------------------------------------------------------
# Correctness, then speed, in one command of at most GPU_FIRST_BUDGET_S seconds (default 420, 240
# with GPU_STEPS) run under a 480-second limit. Each step has a cap and a floor: while a step runs,
# the floors of the steps after it are kept back (RESERVE), so a slow step cannot crowd out the
# speed table, and time a step does not use passes to the next. GPU_STEPS=name,name runs only those.
FIRST_STEPS=(preflight unit_gpu nccl_np1 gpuddp_np2 graphs_bitwise trace_nccl amp
             speed_mnist_ddp ops_gpu speed_pytorch_eager speed_torch_compile)
# Steps that check a result (the verdict's "correct"). The self-test steps of
# tests/e2e/gpu_suite_test.sh (selftest_pass, selftest_fail), sanitize_ops (compute-sanitizer
# on the kernels' unit tests, ~10-60 s) and e2e_all (every gpu_test.sh case) run only when named;
# the self-tests need no
# bundle and no GPU.
FIRST_CORRECTNESS=" preflight unit_gpu nccl_np1 gpuddp_np2 graphs_bitwise trace_nccl amp sanitize_ops e2e_all "
declare -A FIRST_FLOOR=([preflight]=15 [unit_gpu]=20 [nccl_np1]=10 [gpuddp_np2]=15 [graphs_bitwise]=20
  [trace_nccl]=10 [amp]=20 [speed_mnist_ddp]=40 [ops_gpu]=15 [speed_pytorch_eager]=60 [speed_torch_compile]=60
  [selftest_pass]=20 [selftest_fail]=20 [sanitize_ops]=40 [e2e_all]=60)
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
# speed_step NAME CAP VARIANTS PER_RUN_CAP: one round of those variants, 10 epochs each.
speed_step() {
  SPEED_MARK=$(cat "$LOGS/speed/gpu_runs/manifest.tsv" 2>/dev/null | wc -l)
  step "$1" "$2" check_speed env OUT="$LOGS/speed" GPU_COMPARE_APPEND=1 GPU_COMPARE_PEAK=0 \
    GPU_COMPARE_TABLE=0 GPU_COMPARE_VARIANTS="$3" GPU_COMPARE_CAP_S="$4" GPU_COMPARE_BUDGET_S=@BUDGET@ \
    bash bench/gpu_compare.sh "$SPEED_EPOCHS" 1
}
# The FP32 top-1 of graphs_bitwise's one epoch, for amp's comparison (empty if it did not pass).
fp32_top1() { sed -n 's/^# fp32_top1 \([0-9.]*\)$/\1/p' "$LOGS/graphs_bitwise.log" 2>/dev/null | head -n 1; }

first_step() {
  case "$1" in
    preflight) PREFLIGHT_HEADER="$LOGS/preflight-header.txt" step preflight 40 cmd bash tools/gpu-preflight.sh ;;
    unit_gpu) step unit_gpu 45 gtest build/tests/unit_tests --gtest_color=no --gtest_filter='Gpu*' ;;
    nccl_np1) step nccl_np1 30 gtest mpirun -np 1 build/tests/mpi_tests --gtest_color=no --gtest_filter='Nccl.*' ;;
    gpuddp_np2) step gpuddp_np2 45 gtest mpirun -np 2 build/tests/mpi_tests --gtest_color=no --gtest_filter='GpuDdp.*' ;;
    # With --gpu-kernels own's epoch pair too (graphs == eager, top-1 against this FP32 epoch).
    graphs_bitwise) step graphs_bitwise 80 tap env GPU_TEST_CASES=graphs_one_epoch,own_kernels MNIST_DDP_E2E_KEEP="$LOGS/e2e" bash tests/e2e/gpu_test.sh ;;
    trace_nccl) step trace_nccl 40 tap env GPU_TEST_CASES=trace MNIST_DDP_E2E_KEEP="$LOGS/e2e" bash tests/e2e/gpu_test.sh ;;
    # The FP32 reference is graphs_bitwise's when it ran (empty if it failed: amp then says so
    # rather than spend its budget on two more FP32 epochs); alone, amp runs that epoch itself.
    amp) if [[ " ${SELECTED[*]} " == *" graphs_bitwise "* ]]; then
           step amp 60 tap env GPU_TEST_CASES=amp GPU_TEST_FP32_TOP1="$(fp32_top1)" MNIST_DDP_E2E_KEEP="$LOGS/e2e" bash tests/e2e/gpu_test.sh
         else
           step amp 90 tap env GPU_TEST_CASES=amp MNIST_DDP_E2E_KEEP="$LOGS/e2e" bash tests/e2e/gpu_test.sh
         fi ;;
    # graphs_fp32 (--tf32 off): the top-1 target is against the CPU run, which is full FP32.
    speed_mnist_ddp) speed_step speed_mnist_ddp 160 graphs_tf32,graphs_tf32_own,eager_tf32,graphs_fp32,graphs_amp_bf16,graphs_amp_fp16 60 ;;
    # Where a step's device time goes: each op at batch 100 (bench/gpu_ops_bench.cpp), then every
    # cuDNN algorithm of each convolution timed (bench/gpu_conv_algos.cu); both in the logs.
    ops_gpu) step ops_gpu 40 cmd bash -c 'build/bench/gpu_ops_bench --benchmark_color=false --benchmark_min_time=0.002 && build/bench/gpu_conv_algos' ;;
    speed_pytorch_eager) speed_step speed_pytorch_eager 150 pt_eager_tf32,pt_eager_amp_bf16 90 ;;
    # torch.compile last and capped: its compilation may take minutes on a cold cache.
    speed_torch_compile) speed_step speed_torch_compile 150 pt_compiled_tf32 150 ;;
    # Only when named: compute-sanitizer memcheck, then racecheck, on the GpuOps unit tests of the
    # convolutions and BN (each kernel on its own, odd shapes included: out-of-bounds and shared-
    # memory hazards that a training run's shapes would not reach).
    sanitize_ops) local cs
                  if ! cs=$(find_sanitizer); then
                    row FAIL sanitize_ops - 1 - 0 "compute-sanitizer not found"
                    FAILS+=("### sanitize_ops" "compute-sanitizer was not found (set COMPUTE_SANITIZER)")
                    FAILED=1
                  else
                    # shellcheck disable=SC2016  # $CS and $t expand in the inner bash
                    step sanitize_ops 150 check_sanitizer_ops env CS="$cs" bash -c 'for t in memcheck racecheck; do
                      "$CS" --tool "$t" --error-exitcode 99 --print-limit 50 --target-processes all build/tests/unit_tests \
                        --gtest_color=no --gtest_filter="GpuOps.ConvolutionsMatchCpu:GpuOps.BatchNormReluPoolMatchCpu:GpuOps.OwnWeightGradientMatchesExactWithinTf32Model"; done'
                  fi ;;
    # Only when named: every case of tests/e2e/gpu_test.sh (resume GPU->GPU and GPU->CPU->GPU
    # bitwise, capture failure, accumulation, overlap, SyncBN, AMP resume, ...; ~70-100 s).
    e2e_all) step e2e_all 240 tap env MNIST_DDP_E2E_KEEP="$LOGS/e2e" bash tests/e2e/gpu_test.sh ;;
    selftest_pass) step selftest_pass 20 tap bash -c 'echo "ok - selftest_pass (the harness runs a step)"' ;;
    selftest_fail) step selftest_fail 20 cmd bash -c 'for i in $(seq 1 30); do echo "selftest failure line $i"; done; exit 3' ;;
  esac
}

stage_first() {
  local i s stopped=""
  for ((i = 0; i < ${#SELECTED[@]}; i++)); do
    s=${SELECTED[i]}
    if [[ -n $stopped ]]; then
      row FAIL "$s" - - - 0 "not run: $stopped"
      continue
    fi
    # Keep back the floors of the steps still to come, and 10 s to write the summary.
    RESERVE=10
    local j
    for ((j = i + 1; j < ${#SELECTED[@]}; j++)); do RESERVE=$((RESERVE + FIRST_FLOOR[${SELECTED[j]}])); done
    first_step "$s"
    # The binary cannot start: nothing after it can run; the device time goes to a fixed second call.
    if [[ $s == preflight ]] && grep -q 'CANNOT START' "$LOGS/preflight-header.txt" 2>/dev/null; then
      stopped="preflight: the binary cannot start (see the preflight lines above)"
      FAILED=1
    fi
  done
  RESERVE=0
}

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
    [[ $FIRST_CORRECTNESS == *" $name "* || $name == setup || $name == selftest_* ]] || continue
    [[ $name == setup ]] || checked=1
    [[ $status == PASS ]] || correct=no
  done
  # Only speed steps named: nothing was checked, so the verdict does not claim it.
  [[ $checked == 1 || $correct == no ]] || correct="-"
  local verdict="first light: correct $correct; $SPEED_EPOCHS epochs ${verdict_s:--} s; ${verdict_eager:--}x eager; ${verdict_compile:--}x compile"
  {
    echo "gpu-suite first: $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), budget ${STAGE_LIMIT} s${GPU_STEPS:+, GPU_STEPS=$GPU_STEPS}"
    # The machine and library lines (at most 5), the CUDA library lines, the binary's verdict.
    local h="$LOGS/preflight-header.txt"
    { head -n 5 "$h"; grep 'CUDA libraries' "$h" | head -n 3; grep -m1 '^mnist_ddp --device cuda --print-env' "$h"; } 2>/dev/null |
      awk '!seen[$0]++'
    echo
    printf '%-6s %-24s %5s %5s %5s %8s  %s\n' RESULT step pass fail skip seconds note
    printf '%s\n' "${ROWS[@]}" | cut -c1-200
    echo "TOTAL first: $(printf '%s\n' "${ROWS[@]}" | grep -c '^PASS') steps passed, $(printf '%s\n' "${ROWS[@]}" | grep -c '^FAIL') failed, $((SECONDS - STAGE_T0)) s"
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
  [[ $correct == no ]] && FAILED=1
  echo
  cat "$summary"
}

run_first() {
  STAGE=first
  local budget_default=420
  SELECTED=("${FIRST_STEPS[@]}")
  if [[ -n "${GPU_STEPS:-}" ]]; then
    IFS=', ' read -r -a SELECTED <<<"$GPU_STEPS"
    budget_default=240
    local s
    for s in "${SELECTED[@]}"; do
      if [[ -z "${FIRST_FLOOR[$s]:-}" ]]; then
        echo "gpu-suite first: unknown step '$s' in GPU_STEPS (steps: ${FIRST_STEPS[*]})" >&2
        exit 2
      fi
    done
  fi
  # The stage's own clock: the whole command, setup included, minus ~10 s to pack and print.
  STAGE_LIMIT=$((${GPU_FIRST_BUDGET_S:-$budget_default} - 10))
  LOGS="$(mktemp -d /tmp/gpu-suite-first.XXXXXX)"
  # The clock starts with the script (python's torch import above counts too).
  ROWS=() FAILS=() STAGE_T0=0
  # The console, also as a file in $OUT (the reply shows only the tail of the output).
  exec 3>&1 4>&2 > >(tee "$RESULTS/console-first.txt") 2>&1
  local tee_pid=$!
  echo "=== gpu-suite first (results: $RESULTS; budget ${STAGE_LIMIT} s; steps: ${SELECTED[*]})"
  local needs_bundle=0 s
  for s in "${SELECTED[@]}"; do [[ $s == selftest_* ]] || needs_bundle=1; done
  if ((needs_bundle == 0)) || setup; then
    stage_first
  else
    for s in "${SELECTED[@]}"; do row FAIL "$s" - - - 0 "not run: setup failed"; done
  fi
  finish_first
  # Back to the real output, and tee flushed before the script exits (the verdict is its last line).
  exec 1>&3 2>&4 3>&- 4>&-
  wait "$tee_pid" 2>/dev/null
}

run_stage() {
  STAGE="$1"
  LOGS="$(mktemp -d "/tmp/gpu-suite-$STAGE.XXXXXX")"
  ROWS=() FAILS=() EXTRA="" HEADER="" STAGE_T0=$SECONDS
  echo "=== gpu-suite $STAGE (results: $RESULTS)"
  if setup; then
    HEADER="$(header)"  # now, not after a stage that used its whole budget
    "stage_$STAGE"
  fi
  finish
}

# Sourced (tests/e2e/gpu_suite_test.sh reads its helpers): define, run nothing.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0
FAILED=0
case "${1:-all}" in
  first) run_first; exit "$FAILED" ;;  # the verdict stays the last line printed
  test | sanitize | bench) run_stage "$1" ;;
  all) for s in test sanitize bench; do run_stage "$s"; done ;;
  *) echo "usage: tools/gpu-suite.sh [first|test|sanitize|bench|all]  (GPU_STEPS=name,name with first)" >&2; exit 2 ;;
esac
echo
echo "results: $(ls -d "$RESULTS"/summary-*.txt "$RESULTS"/logs-*.tar.gz 2>/dev/null | tr '\n' ' ')"
exit "$FAILED"
