#!/usr/bin/env bash
# gpu_compare.sh — GPU side by side in one run: PyTorch DDP (NCCL, eager, dataset preloaded on the
# GPU) and mnist_ddp (--device cuda), same ConvNet, data, batch 100, SGD(0.01, 0.9), one GPU,
# EPOCHS epochs (default 10). Prints images/s, training seconds, the ratio, both accuracies, and
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
MASTER_PORT=29541 RANK=0 WORLD_SIZE=1 python3 bench/pytorch_ddp.py --device cuda --data data/dataset \
  --epochs "$EPOCHS" | tee "$OUTD/pytorch_gpu.json"
./mnist_ddp --device cuda --data data/dataset --epochs "$EPOCHS" --lr 0.01 --momentum 0.9 \
  --progress off --log-dir "$OUTD/gpu_log" --checkpoint-dir "$OUTD/gpu_ckpt" | tail -3
python3 - "$OUTD" "$peak" <<'PY'
import json, sys
out, peak = sys.argv[1], float(sys.argv[2])
pt = json.loads(open(f"{out}/pytorch_gpu.json").read().strip().splitlines()[-1])
done = [json.loads(l) for l in open(f"{out}/gpu_log/metrics.jsonl") if '"done"' in l][-1]
floor = peak * 1e12 / 16.4e6
print(f"PyTorch DDP (NCCL): {pt['images_per_s']:.0f} img/s, {pt['train_s']:.2f} s, top-1 {100*pt['top1']:.2f}%")
print(f"mnist_ddp (cuda):   {done['images_per_s']:.0f} img/s, {done['train_s']:.2f} s, top-1 {100*done['top1']:.2f}%")
print(f"ratio {done['images_per_s']/pt['images_per_s']:.2f}x; floor {floor:.0f} img/s: mnist_ddp at {100*done['images_per_s']/floor:.2f}%")
PY
