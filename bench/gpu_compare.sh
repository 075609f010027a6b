#!/usr/bin/env bash
# gpu_compare.sh — GPU side by side, one GPU, same ConvNet, data, batch 100, SGD(0.01, 0.9), EPOCHS
# epochs (default 10): PyTorch DDP (NCCL, dataset preloaded on the GPU; eager and
# torch.compile(reduce-overhead) with TF32 as mnist_ddp's default, eager autocast fp16 with
# GradScaler and bf16) against mnist_ddp (--device cuda: CUDA graphs and TF32 each on and off,
# --amp fp16 / bf16 with graphs). Fair clocks: PyTorch eager and compiled both run 3 warm-up steps
# before their clock (lazy cuBLAS/cuDNN/NCCL setup, compilation, capture), as mnist_ddp keeps its
# setup out of its clock; both clocks stop after a device sync (mnist_ddp: the C++ side syncs
# before reading it). Each variant runs ROUNDS times (default 3), interleaved round-robin so drifts
# (clocks, neighbours) hit all variants alike; the table shows each variant's MEDIAN images/s and
# ms per step, its training seconds and top-1, the speed against PyTorch eager at the same precision
# and against the GEMM reference (16.4 MFLOP per image over this GPU's measured matrix-product rate
# at the row's precision: a reference, not a bound). A failing run leaves "failed (exit N)" in its
# row; the script goes on and always prints the table (also to $OUTD/gpu_compare.txt).
#   bench/gpu_compare.sh [EPOCHS] [ROUNDS]
# Env: OUT (results directory, default bench/results), MNIST_DDP (binary, default ./mnist_ddp),
# GPU_COMPARE_BUDGET_S (seconds for the whole script; runs that would not fit are left out and say
# so; default unlimited), PYTHON (default python3).
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
rm -rf "$RUNS" && mkdir -p "$RUNS" || exit 1
: > "$RUNS/manifest.tsv"

# Matrix-product rate per precision (TFLOP/s), the reference's denominator; "0" when unmeasurable.
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

# Variants: NAME|KIND|ARGS. pt: bench/pytorch_ddp.py, md: mnist_ddp.
variants=(
  "pt_eager_tf32|pt|"
  "pt_compiled_tf32|pt|--compile"
  "pt_eager_amp_fp16|pt|--amp fp16"
  "pt_eager_amp_bf16|pt|--amp bf16"
  "graphs_tf32|md|"
  "eager_tf32|md|--cuda-graphs off"
  "graphs_fp32|md|--tf32 off"
  "eager_fp32|md|--cuda-graphs off --tf32 off"
  "graphs_amp_fp16|md|--amp fp16"
  "graphs_amp_bf16|md|--amp bf16"
)
# Per-run time limits (s): compilation makes the compiled variant the slowest.
cap() { case "$1" in pt_compiled*) echo 300 ;; pt_*) echo 180 ;; *) echo 120 ;; esac; }

port=29541
for ((r = 1; r <= ROUNDS; r++)); do
  for v in "${variants[@]}"; do
    IFS='|' read -r name kind args <<<"$v"
    dir="$RUNS/$name-r$r"
    mkdir -p "$dir"
    limit=$(cap "$name")
    if ((BUDGET > 0)); then
      left=$((BUDGET - (SECONDS - T_START) - 20))  # 20 s kept for the table
      if ((left < 30)); then
        printf '%s\t%s\t%s\t%s\n' "$name" "$r" "skipped" "$dir" >>"$RUNS/manifest.tsv"
        continue
      fi
      ((limit > left)) && limit=$left
    fi
    echo "== round $r/$ROUNDS: $name ${args:-(defaults)}"
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

"$PY" - "$RUNS" "$EPOCHS" "$ROUNDS" <<'PY' | tee "$OUTD/gpu_compare.txt"
import json, statistics, sys
runs, epochs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    peak = json.load(open(f"{runs}/peak.json"))
except Exception:
    peak = {}
labels = {
    "pt_eager_tf32": ("PyTorch DDP eager (TF32)", "tf32"),
    "pt_compiled_tf32": ("PyTorch DDP compiled (TF32)", "tf32"),
    "pt_eager_amp_fp16": ("PyTorch DDP eager autocast fp16", "fp16"),
    "pt_eager_amp_bf16": ("PyTorch DDP eager autocast bf16", "bf16"),
    "graphs_tf32": ("mnist_ddp graphs TF32 (default)", "tf32"),
    "eager_tf32": ("mnist_ddp eager TF32", "tf32"),
    "graphs_fp32": ("mnist_ddp graphs FP32", "fp32"),
    "eager_fp32": ("mnist_ddp eager FP32", "fp32"),
    "graphs_amp_fp16": ("mnist_ddp graphs --amp fp16", "fp16"),
    "graphs_amp_bf16": ("mnist_ddp graphs --amp bf16", "bf16"),
}
# The PyTorch row each mnist_ddp row is compared with: eager at the same precision (FP32 rows
# against TF32 eager too: PyTorch's fastest FP32-input eager mode).
baseline = {"tf32": "pt_eager_tf32", "fp32": "pt_eager_tf32", "fp16": "pt_eager_amp_fp16",
            "bf16": "pt_eager_amp_bf16"}

def result(name, rc, d):
    """(images/s, ms/step, train s, top1) of one run, or None."""
    if rc != "0":
        return None
    try:
        if name.startswith("pt_"):
            r = json.loads([l for l in open(f"{d}/stdout") if l.startswith("{")][-1])
            steps = r.get("steps") or 0
        else:
            r = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if '"done"' in l][-1]
            steps = r.get("steps") or 0
        return (r["images_per_s"], 1e3 * r["train_s"] / steps if steps else float("nan"),
                r["train_s"], r["top1"])
    except Exception:
        return None

per = {n: {"ok": [], "fail": [], "skipped": 0} for n in labels}
for line in open(f"{runs}/manifest.tsv"):
    name, rnd, rc, d = line.rstrip("\n").split("\t")
    if rc == "skipped":
        per[name]["skipped"] += 1
        continue
    r = result(name, rc, d)
    if r is None:
        per[name]["fail"].append(rc if rc != "0" else "0, no result")
    else:
        per[name]["ok"].append(r)

med = {}
for n, p in per.items():
    if p["ok"]:
        med[n] = tuple(statistics.median(x[i] for x in p["ok"]) for i in range(4))

print()
print(f"GPU: {peak.get('gpu', '?')}, torch {peak.get('torch', '?')}; {epochs} epochs, batch 100; "
      f"median of {rounds} interleaved rounds")
print("matrix-product rate (TFLOP/s): " + ", ".join(
    f"{k} {peak[k]:.1f}" for k in ("tf32", "fp32", "fp16", "bf16") if k in peak))
print(f"{'implementation':34} {'img/s':>9} {'ms/step':>8} {'train s':>8} {'top-1':>7} "
      f"{'vs PyTorch':>10} {'of GEMM ref':>11}  runs")
for n, (label, prec) in labels.items():
    p = per[n]
    runs_note = f"{len(p['ok'])}/{rounds}"
    if p["fail"]:
        runs_note += " failed (exit " + ", ".join(p["fail"]) + ")"
    if p["skipped"]:
        runs_note += f" {p['skipped']} not run (time budget)"
    if n not in med:
        what = ("failed (exit " + ", ".join(p["fail"]) + ")") if p["fail"] else "not run (time budget)"
        print(f"{label:34} {what}")
        continue
    ips, ms, ts, top1 = med[n]
    # mnist_ddp rows against PyTorch eager at their precision; the compiled row against eager.
    b = ("pt_eager_tf32" if n == "pt_compiled_tf32" else None) if n.startswith("pt_") else baseline[prec]
    vs = f"{ips / med[b][0]:9.2f}x" if b in med else f"{'-':>10}"
    ref = peak.get(prec)
    of = f"{100 * ips * 16.4e6 / (ref * 1e12):10.2f}%" if ref else f"{'?':>11}"
    print(f"{label:34} {ips:9.0f} {ms:8.3f} {ts:8.2f} {100 * top1:6.2f}% {vs} {of}  {runs_note}")
print("vs PyTorch: against PyTorch eager at the same precision (TF32 eager for FP32 rows); "
      "of GEMM ref: images/s x 16.4 MFLOP / the rate at the row's precision")
json.dump({"epochs": epochs, "rounds": rounds, "peak_tflops": peak,
           "median": {n: dict(zip(("images_per_s", "ms_per_step", "train_s", "top1"), v)) for n, v in med.items()},
           "runs": per}, open(f"{runs}/../gpu_compare.json", "w"), indent=1)
PY
# Exit status: 0 only when every run that was started produced a result.
! awk -F'\t' '$3 != "0" && $3 != "skipped" { bad = 1 } END { exit !bad }' "$RUNS/manifest.tsv"
