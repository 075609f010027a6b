#!/usr/bin/env bash
# compare_pytorch.sh — side by side in one run: PyTorch DDP (gloo) and mnist_ddp, same ConvNet,
# data, batch 100 per rank, SGD(lr 0.01, momentum 0.9), 2 ranks x 1 thread, launched by the same
# mpirun. Prints images/s of each, the ratio, both test accuracies, and mnist_ddp's fraction of
# the GEMM-bound floor (16.4 MFLOP per image over the measured single-core SGEMM rate x ranks).
#   bench/compare_pytorch.sh [EPOCHS] [RANKS]
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi_env.sh
EPOCHS="${1:-1}"
RANKS="${2:-2}"
DATA=data/dataset
OUT="bench/results"
mkdir -p "$OUT"

echo "== SGEMM rate (single core, the floor's denominator)"
gflops=$(build/bench/ops_bench --benchmark_filter='BM_Sgemm/1024$' --benchmark_min_time=1 \
           --benchmark_format=json 2>/dev/null | python3 -c \
           'import json,sys; print(json.load(sys.stdin)["benchmarks"][0]["GFLOP/s"]/1e9)')
echo "   ${gflops} GFLOP/s"

echo "== PyTorch DDP (gloo), ${RANKS} ranks x 1 thread, ${EPOCHS} epoch(s)"
timeout 1800 mpirun -np "$RANKS" /usr/bin/python3 bench/pytorch_ddp.py --data "$DATA" \
  --epochs "$EPOCHS" --threads 1 | tee "$OUT/pytorch.json"

echo "== mnist_ddp, ${RANKS} ranks x 1 thread, ${EPOCHS} epoch(s)"
timeout 1800 mpirun -np "$RANKS" ./mnist_ddp --data "$DATA" --epochs "$EPOCHS" --threads 1 \
  --lr 0.01 --momentum 0.9 --progress off --log-dir "$OUT/mnist_ddp_log" > "$OUT/mnist_ddp.txt"
tail -2 "$OUT/mnist_ddp.txt"
python3 - "$OUT" "$gflops" "$RANKS" <<'PY'
import json, re, sys
out, gflops, ranks = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
pt = json.loads(open(f"{out}/pytorch.json").read().strip().splitlines()[-1])
done = [json.loads(l) for l in open(f"{out}/mnist_ddp_log/metrics.jsonl") if '"done"' in l][-1]
floor = gflops * 1e9 / 16.4e6 * ranks
ratio = done["images_per_s"] / pt["images_per_s"]
print()
print(f"{'':24}{'images/s':>12}{'test top-1':>12}")
print(f"{'PyTorch DDP (gloo)':24}{pt['images_per_s']:12.0f}{100*pt['top1']:11.2f}%")
print(f"{'mnist_ddp (MPI)':24}{done['images_per_s']:12.0f}{100*done['top1']:11.2f}%")
print(f"ratio mnist_ddp / PyTorch: {ratio:.2f}x   accuracy difference: {100*(done['top1']-pt['top1']):+.2f} points")
print(f"GEMM-bound floor: {floor:.0f} images/s ({ranks} cores x {gflops:.1f} GFLOP/s / 16.4 MFLOP); "
      f"mnist_ddp reaches {100*done['images_per_s']/floor:.1f}% of it, PyTorch {100*pt['images_per_s']/floor:.1f}%")
json.dump({"pytorch": pt, "mnist_ddp": done, "ratio": ratio, "floor_images_per_s": floor,
           "sgemm_gflops": gflops}, open(f"{out}/compare.json", "w"), indent=1)
PY
