#!/usr/bin/env bash
# gpu-suite.sh — the GPU checks on a lent GPU machine, run from the repository root with dist/ from
# `make bundle` (no MPI, HDF5 or oneDNN needed there; CUDA 13 cuDNN/cuBLAS/NCCL come from PyTorch's
# wheels or a toolkit: dist/b/bin/bundle-env.sh finds them, and says which are missing):
#   tools/gpu-suite.sh test      nvidia-smi; GPU unit tests, then all the others; MPI tests (NCCL and
#                                GpuDdp on 1 rank, GpuDdp on 2 ranks sharing the GPU);
#                                tests/e2e/gpu_test.sh; NCCL all-reduce bandwidth (comm_bench)
#   tools/gpu-suite.sh sanitize  compute-sanitizer memcheck and racecheck on a 20-step training run,
#                                CUDA graphs off and on
#   tools/gpu-suite.sh bench     bench/gpu_compare.sh 10 (mnist_ddp against PyTorch DDP)
#   tools/gpu-suite.sh [all]     the three in turn: ~30 minutes, more than one 10-minute command on
#                                the lent machine; there, run each stage as its own command
# Each stage sets up what it needs by itself (unpacks the bundle, links the wrappers, copies the
# dataset; idempotent), fits in 10 minutes (the per-step budgets below, enforced by `timeout` and
# shrunk to what is left of the stage's 570 s), and leaves exactly two files in the results folder
# ($OUT, else /tmp/gpu-suite): summary-STAGE.txt (the machine, then one line per step: PASS/FAIL,
# tests passed/failed/skipped, seconds; then the tail of each failure) and logs-STAGE.tar.gz (every
# log of the stage, checkpoints left out). MNIST_DDP_REQUIRE_GPU=1 is always set: the C++ tests and
# gpu_test.sh fail instead of skipping without a GPU, and any skip left counts as a failure here.
# Exit status: 0 only when every step of every stage run passed with nothing skipped.
# LD_LIBRARY_PATH is never exported here: the bundle's wrappers (./mnist_ddp, build/tests/*,
# build/bench/*, mpirun) set it for the project's binaries alone, so the bundle's Debian
# libstdc++/libssl never reach python3. Open MPI: tests/mpi_env.sh, as every other launch.
# python3 needs torch (bench) and h5py + numpy (checkpoint comparisons); a missing h5py is
# installed from dist/wheels/ when a wheel is there (pip download --only-binary=:all: h5py -d
# dist/wheels, for that machine's Python), into dist/pylib.
# shellcheck disable=SC2317  # functions called indirectly: "stage_$STAGE", step KIND
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
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
    gtest) { grep -E '^\[  (FAILED|SKIPPED) \] .*\(' "$2"
             grep -B3 -A12 -E 'Failure$|^unknown file: Failure' "$2" | head -n 80
             tail -n 15 "$2"; } | awk '!seen[$0]++' | head -n 100 ;;
    tap) { awk '/^(ok|skip) - /{p=0} /^not ok - /{p=1} p || /^skip - /' "$2" | head -n 100
           tail -n 3 "$2"; } | awk '!seen[$0]++' ;;
    check_sanitizer) { grep -m 60 '^========= ' "$2"; tail -n 10 "$2"; } | awk '!seen[$0]++' ;;
    check_bench) grep -E '^   exit |^== .*failed' "$2" | awk '!seen[$0]++' | head -n 30 ;;
    *) tail -n 40 "$2" ;;
  esac
}

# step NAME BUDGET KIND CMD...: runs CMD from the repository root under `timeout` (BUDGET seconds,
# or what is left of the stage if less), stdout and stderr in $LOGS/NAME.log, and records a row.
# KIND: gtest | tap (counted from the log) | cmd (the exit status) | CHECKFN (a function called
# with the log and the exit status that sets NP NF NS and may set NOTE).
step() {
  local name="$1" budget="$2" kind="$3"; shift 3
  local log="$LOGS/$name.log" left t0 rc status
  left=$((STAGE_LIMIT - (SECONDS - STAGE_T0)))
  if ((left < 10)); then
    row FAIL "$name" - - - 0 "not run: the stage's ${STAGE_LIMIT} s are used up"
    FAILED=1
    return 1
  fi
  ((budget > left)) && budget=$left
  echo "--- $name (budget ${budget} s): $*"
  t0=$(now)
  timeout --kill-after=15 "$budget" "$@" >"$log" 2>&1
  rc=$?
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
    FAILS+=("### $name ($NOTE; full log: logs-$STAGE.tar.gz $name.log)" "$(failure_tail "$kind" "$log")")
    return 1
  fi
  return 0
}

# --- setup, shared by the stages (idempotent) -----------------------------------------------------
B="$ROOT/dist/b"
setup() {
  local log="$LOGS/setup.log" t0 why=""
  t0=$(now)
  {
    if [[ ! -f dist/bundle.tar.xz ]]; then
      why="dist/bundle.tar.xz missing: run \`make bundle\` and carry dist/"
    else
      local stamp
      stamp=$(stat -c '%s %Y' dist/bundle.tar.xz)
      if [[ ! -f "$B/.unpacked" || "$(cat "$B/.unpacked")" != "$stamp" ]]; then
        echo "unpacking dist/bundle.tar.xz into $B"
        rm -rf "$B.new" && mkdir -p "$B.new" && tar -C "$B.new" -xJf dist/bundle.tar.xz &&
          echo "$stamp" >"$B.new/.unpacked" && rm -rf "$B" && mv "$B.new" "$B" ||
          why="unpacking dist/bundle.tar.xz failed"
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
      for t in ops_bench comm_bench; do ln -sfn "$B/bin/$t" "build/bench/$t"; done
      if ! cmp -s dist/data/DATASET data/dataset/DATASET 2>/dev/null ||
         [[ $(ls data/dataset/*.gz 2>/dev/null | wc -l) -lt 4 ]]; then
        rm -rf data/dataset && mkdir -p data/dataset && cp dist/data/* data/dataset/ || why="copying dist/data failed"
      fi
    fi
    # h5py for the checkpoint comparisons: from dist/wheels when python3 lacks it.
    if [[ -z $why ]] && ! python3 -c "import h5py" 2>/dev/null && ls dist/wheels/h5py-*.whl >/dev/null 2>&1; then
      python3 -m pip install --no-index --no-deps --find-links dist/wheels --target dist/pylib h5py &&
        echo "h5py installed from dist/wheels into dist/pylib"
    fi
  } >"$log" 2>&1
  if [[ -d dist/pylib ]]; then export PYTHONPATH="$ROOT/dist/pylib${PYTHONPATH:+:$PYTHONPATH}"; fi
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
  echo "python3: $(timeout 60 python3 -c '
import sys
v = [sys.version.split()[0]]
try:
    import torch
    v.append(f"torch {torch.__version__} (CUDA {torch.version.cuda})")
except Exception as e:
    v.append(f"no torch ({type(e).__name__})")
for m in ("h5py", "numpy"):
    try:
        v.append(f"{m} {__import__(m).__version__}")
    except Exception:
        v.append(f"NO {m} (checkpoint comparisons fail)")
print(", ".join(v))' 2>&1 | tail -n 1)"
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
  # budgets (H100, seconds): 15 + 45 + 60 + 45 + 45 + 290 + 30 = 530, + setup (<= 30) and packing < 600
  step gpu_info 15 cmd nvidia-smi
  step unit_gpu 45 gtest build/tests/unit_tests --gtest_color=no --gtest_filter='Gpu*'
  step unit_others 60 gtest build/tests/unit_tests --gtest_color=no --gtest_filter='-Gpu*'
  step mpi_np1_nccl_gpuddp 45 gtest mpirun -np 1 build/tests/mpi_tests --gtest_color=no --gtest_filter='Nccl.*:GpuDdp.SharedGpu*'
  step mpi_np2_gpuddp 45 gtest mpirun -np 2 build/tests/mpi_tests --gtest_color=no --gtest_filter='GpuDdp.*'
  step e2e_gpu_test 290 tap env MNIST_DDP_E2E_KEEP="$LOGS/e2e" bash tests/e2e/gpu_test.sh
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
  local sd="$ROOT/dist/sanitize-data"
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

FAILED=0
case "${1:-all}" in
  test | sanitize | bench) run_stage "$1" ;;
  all) for s in test sanitize bench; do run_stage "$s"; done ;;
  *) echo "usage: tools/gpu-suite.sh [test|sanitize|bench|all]" >&2; exit 2 ;;
esac
echo
echo "results: $(ls -d "$RESULTS"/summary-*.txt "$RESULTS"/logs-*.tar.gz 2>/dev/null | tr '\n' ' ')"
exit "$FAILED"
