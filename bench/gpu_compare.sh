#!/usr/bin/env bash
# gpu_compare.sh — GPU side by side in one run: PyTorch DDP (NCCL, eager, dataset preloaded on the
# GPU) and mnist_ddp (--device cuda), same ConvNet, data, batch 100, SGD(0.01, 0.9), one GPU,
# EPOCHS epochs (default 10); PyTorch eager and torch.compile(reduce-overhead); mnist_ddp with
# CUDA graphs and TF32 each on and off, and --amp fp16 / bf16 with graphs. Prints images/s, training seconds, the ratio, both accuracies, and
# mnist_ddp's fraction of the compute floor (16.4 MFLOP per image over the GPU's measured FP32/TF32
# matrix-product rate). Needs python3 with torch and the mnist_ddp binary (or the bundle).
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-10}"
OUTD="${OUT:-bench/results}"
mkdir -p "$OUTD"
peak=$(python3 - <<'PY'
import torch, time
a = torch.randn(8192, 8192, device="cuda"); b = torch.randn(8192, 8192, device="cuda")
torch.backends.cuda.matmul.allow_tf32 = True
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(10): a @ b
torch.cuda.synchronize(); print(10 * 2 * 8192**3 / (time.perf_counter() - t) / 1e12)
PY
)
echo "GPU TF32 matrix-product rate: ${peak} TFLOP/s"
for v in eager compiled; do
  MASTER_PORT=29541 RANK=0 WORLD_SIZE=1 python3 bench/pytorch_ddp.py --device cuda --data data/dataset \
    --epochs "$EPOCHS" $([[ $v == compiled ]] && echo --compile) | tee "$OUTD/pytorch_gpu_$v.json" ||
    echo '{"impl": "pytorch_'$v'", "failed": true}' > "$OUTD/pytorch_gpu_$v.json"
done
# mnist_ddp: default (CUDA graphs, TF32), then each off, then mixed precision (with graphs).
variants=("graphs_tf32:" "eager_tf32:--cuda-graphs off" "graphs_fp32:--tf32 off" "eager_fp32:--cuda-graphs off --tf32 off"
  "graphs_amp_fp16:--amp fp16" "graphs_amp_bf16:--amp bf16")
for v in "${variants[@]}"; do
  name=${v%%:*}
  # shellcheck disable=SC2086
  ./mnist_ddp --device cuda --data data/dataset --epochs "$EPOCHS" --lr 0.01 --momentum 0.9 ${v#*:} \
    --progress off --log-dir "$OUTD/gpu_$name" --checkpoint-dir "$OUTD/gpu_ckpt_$name" | tail -2
done
python3 - "$OUTD" "$peak" <<'PY'
import json, sys
out, peak = sys.argv[1], float(sys.argv[2])
floor = peak * 1e12 / 16.4e6
rows = []
for v in ("eager", "compiled"):
    r = json.loads(open(f"{out}/pytorch_gpu_{v}.json").read().strip().splitlines()[-1])
    rows.append((f"PyTorch DDP NCCL {v}", r.get("images_per_s"), r.get("train_s"), r.get("top1")))
for v in ("graphs_tf32", "eager_tf32", "graphs_fp32", "eager_fp32", "graphs_amp_fp16", "graphs_amp_bf16"):
    d = [json.loads(l) for l in open(f"{out}/gpu_{v}/metrics.jsonl") if '"done"' in l][-1]
    rows.append((f"mnist_ddp {v}", d["images_per_s"], d["train_s"], d["top1"]))
base = rows[0][1]
print(f"floor {floor:.0f} img/s ({peak:.1f} TFLOP/s TF32 / 16.4 MFLOP per image)")
print(f"{'implementation':32} {'img/s':>10} {'train s':>8} {'top-1':>7} {'vs eager':>9} {'of floor':>9}")
for name, ips, ts, top1 in rows:
    if ips is None:
        print(f"{name:32} failed"); continue
    print(f"{name:32} {ips:10.0f} {ts:8.2f} {100*top1:6.2f}% {ips/base:8.2f}x {100*ips/floor:8.2f}%")
PY
