#!/usr/bin/env bash
# gpu_compare.sh — GPU side by side, one GPU, same ConvNet, data, batch 100, SGD(0.01, 0.9), EPOCHS
# epochs (default 10): PyTorch DDP (NCCL, dataset preloaded on the GPU; eager and
# torch.compile(reduce-overhead) with TF32 as mnist_ddp's default, eager autocast fp16 with
# GradScaler and bf16) against mnist_ddp (--device cuda: CUDA graphs and TF32 each on and off,
# --amp fp16 / bf16 with graphs). Fair clocks: PyTorch eager and compiled both run 3 warm-up steps
# before their clock (lazy cuBLAS/cuDNN/NCCL setup, compilation, capture), as mnist_ddp keeps its
# setup out of its clock; both clocks stop after a device sync (mnist_ddp: the C++ side syncs
# before reading it). Each variant runs ROUNDS times (default 3), interleaved round-robin so drifts
# (clocks, neighbours) hit all variants alike; bench/gpu_table.py prints the table (medians, the
# speed against PyTorch eager and torch.compile, the GEMM reference) to $OUTD/gpu_compare.txt and
# the console, and its JSON to $OUTD/gpu_compare.json. A failing run leaves "failed (exit N)" in
# its row; the script goes on and always prints the table.
#   bench/gpu_compare.sh [EPOCHS] [ROUNDS]
# Env: OUT (results directory, default bench/results), MNIST_DDP (binary, default ./mnist_ddp),
# GPU_COMPARE_BUDGET_S (seconds for the whole script; runs that would not fit are left out and say
# so; default unlimited), PYTHON (default python3), and for callers that assemble one table from
# several calls (tools/gpu-suite.sh first): GPU_COMPARE_VARIANTS (names, comma-separated, run in
# that order; default all), GPU_COMPARE_CAP_S (per-run limit instead of the built-in ones),
# GPU_COMPARE_APPEND=1 (keep the runs already in $OUTD/gpu_runs), GPU_COMPARE_PEAK=0 (skip the
# matrix-product rates), GPU_COMPARE_TABLE=0 (no table).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
EPOCHS="${1:-10}"
ROUNDS="${2:-3}"
OUTD="${OUT:-bench/results}"
BIN="${MNIST_DDP:-./mnist_ddp}"
PY="${PYTHON:-python3}"
BUDGET="${GPU_COMPARE_BUDGET_S:-0}"
T_START=$SECONDS
RUNS="$OUTD/gpu_runs"
if [[ "${GPU_COMPARE_APPEND:-0}" != 1 ]]; then rm -rf "$RUNS"; fi
mkdir -p "$RUNS" || exit 1
touch "$RUNS/manifest.tsv"

# Matrix-product rate per precision (TFLOP/s), the reference's denominator; "0" when unmeasurable.
if [[ "${GPU_COMPARE_PEAK:-1}" != 0 ]]; then
  echo "== GPU matrix-product rates (8192^3, TFLOP/s)"
  timeout 120 "$PY" - >"$RUNS/peak.json" 2>"$RUNS/peak.err" <<'PY'
import json, time, torch
res = {}
for name, dtype, tf32 in (("tf32", torch.float32, True), ("fp32", torch.float32, False),
                          ("fp16", torch.float16, False), ("bf16", torch.bfloat16, False)):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
    b = torch.randn(8192, 8192, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    n = 5 if name == "fp32" else 10
    t = time.perf_counter()
    for _ in range(n):
        a @ b
    torch.cuda.synchronize()
    res[name] = n * 2 * 8192**3 / (time.perf_counter() - t) / 1e12
res["gpu"] = torch.cuda.get_device_name(0)
res["torch"] = torch.__version__
print(json.dumps(res))
PY
  echo "   $(cat "$RUNS/peak.json" 2>/dev/null || echo "failed: $(tail -n 1 "$RUNS/peak.err")")"
fi

# Variants: NAME|KIND|ARGS. pt: bench/pytorch_ddp.py, md: mnist_ddp.
all_variants=(
  "pt_eager_tf32|pt|"
  "pt_compiled_tf32|pt|--compile"
  "pt_eager_amp_fp16|pt|--amp fp16"
  "pt_eager_amp_bf16|pt|--amp bf16"
  "graphs_tf32|md|"
  "eager_tf32|md|--cuda-graphs off"
  "graphs_tf32_own|md|--gpu-kernels own"
  "graphs_fp32|md|--tf32 off"
  "eager_fp32|md|--cuda-graphs off --tf32 off"
  "graphs_amp_fp16|md|--amp fp16"
  "graphs_amp_bf16|md|--amp bf16"
)
variants=()
if [[ -n "${GPU_COMPARE_VARIANTS:-}" ]]; then
  IFS=', ' read -r -a wanted <<<"$GPU_COMPARE_VARIANTS"
  for w in "${wanted[@]}"; do
    found=""
    for v in "${all_variants[@]}"; do [[ ${v%%|*} == "$w" ]] && found=$v; done
    [[ -n $found ]] || { echo "gpu_compare.sh: unknown variant '$w' (GPU_COMPARE_VARIANTS)" >&2; exit 2; }
    variants+=("$found")
  done
else
  variants=("${all_variants[@]}")
fi
# Per-run time limits (s): compilation makes the compiled variant the slowest.
cap() {
  if [[ -n "${GPU_COMPARE_CAP_S:-}" ]]; then echo "$GPU_COMPARE_CAP_S"; return; fi
  case "$1" in pt_compiled*) echo 300 ;; pt_*) echo 180 ;; *) echo 120 ;; esac
}
# Seconds kept at the end of the budget: for the table, when this call prints one.
keep=20
[[ "${GPU_COMPARE_TABLE:-1}" == 0 ]] && keep=3

port=$((29541 + RANDOM % 1000))
for ((r = 1; r <= ROUNDS; r++)); do
  for v in "${variants[@]}"; do
    IFS='|' read -r name kind args <<<"$v"
    dir="$RUNS/$name-r$r"
    mkdir -p "$dir"
    limit=$(cap "$name")
    if ((BUDGET > 0)); then
      left=$((BUDGET - (SECONDS - T_START) - keep))
      if ((left < 15)); then
        printf '%s\t%s\t%s\t%s\n' "$name" "$r" "skipped" "$dir" >>"$RUNS/manifest.tsv"
        continue
      fi
      ((limit > left)) && limit=$left
    fi
    echo "== round $r/$ROUNDS: $name ${args:-(defaults)} (limit ${limit} s)"
    port=$((port + 1))
    # shellcheck disable=SC2086
    if [[ $kind == pt ]]; then
      MASTER_PORT=$port RANK=0 WORLD_SIZE=1 timeout --kill-after=10 "$limit" "$PY" bench/pytorch_ddp.py \
        --device cuda --data data/dataset --epochs "$EPOCHS" $args >"$dir/stdout" 2>"$dir/stderr"
    else
      timeout --kill-after=10 "$limit" "$BIN" --device cuda --data data/dataset --epochs "$EPOCHS" \
        --lr 0.01 --momentum 0.9 $args --progress off --log-dir "$dir" --checkpoint-dir "$dir/ckpt" \
        >"$dir/stdout" 2>"$dir/stderr"
    fi
    rc=$?
    rm -rf "$dir/ckpt"
    printf '%s\t%s\t%s\t%s\n' "$name" "$r" "$rc" "$dir" >>"$RUNS/manifest.tsv"
    if ((rc == 0)); then tail -n 1 "$dir/stdout" | cut -c1-160; else echo "   exit $rc: $(tail -n 2 "$dir/stderr" | tr '\n' ' ' | cut -c1-200)"; fi
  done
done

if [[ "${GPU_COMPARE_TABLE:-1}" != 0 ]]; then
  echo
  "$PY" bench/gpu_table.py "$RUNS" "$EPOCHS" "$ROUNDS" --json "$OUTD/gpu_compare.json" | tee "$OUTD/gpu_compare.txt"
fi
# Exit status: 0 only when every run that was started produced a result.
! awk -F'\t' '$3 != "0" && $3 != "skipped" { bad = 1 } END { exit !bad }' "$RUNS/manifest.tsv"
