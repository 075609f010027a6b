#!/usr/bin/env bash
# compare_pytorch.sh — side by side: PyTorch DDP (gloo; Debian's python3-torch) and mnist_ddp,
# same ConvNet, data, batch 100 per rank, SGD(lr 0.01, momentum 0.9), RANKS ranks x 1 thread,
# launched by the same mpirun. Each runs ROUNDS times (default 3), interleaved (PyTorch, mnist_ddp,
# PyTorch, ...) so the machine's drifts hit both alike; prints the MEDIAN images/s and ms per step
# of each, the ratio, both test accuracies, and each one's fraction of the GEMM-rate reference
# (16.4 MFLOP per image over the measured single-core SGEMM rate x ranks: a reference, not a
# bound: oneDNN's direct convolutions run faster than square SGEMM). A failing run leaves
# "failed (exit N)" in its row; the script goes on and always prints the table.
#   bench/compare_pytorch.sh [EPOCHS] [RANKS] [ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
source bench/side_by_side_lib.sh
EPOCHS="${1:-1}"
RANKS="${2:-2}"
ROUNDS="${3:-3}"
DATA=data/dataset
OUTD="bench/results"
RUNS="$OUTD/cpu_runs"
rm -rf "$RUNS" && mkdir -p "$RUNS" || exit 1
: > "$RUNS/manifest.tsv"

echo "== SGEMM rate (single core, the reference's denominator)"
# OpenBLAS's own choice of kernels for this CPU, whatever OPENBLAS_CORETYPE the environment sets
# (one machine of this project's exported Haswell: an AVX2 SGEMM as the AVX-512 build's reference).
blas_core=$(env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 build/bench/ops_bench --benchmark_filter='^$' 2>&1 |
  sed -n 's/^Core: //p' | head -1)
gflops=$(env -u OPENBLAS_CORETYPE build/bench/ops_bench --benchmark_filter='BM_Sgemm/1024$' --benchmark_min_time=1 \
           --benchmark_format=json 2>/dev/null | python3 -c \
           'import json,sys; print(json.load(sys.stdin)["benchmarks"][0]["GFLOP/s"]/1e9)' 2>/dev/null)
[[ -n "$gflops" ]] || gflops=0
echo "   ${gflops} GFLOP/s (OpenBLAS kernels: ${blas_core:-unknown})"

for ((r = 1; r <= ROUNDS; r++)); do
  train_run pytorch "$r" pytorch off
  train_run mnist_ddp "$r" mnist_ddp off
done

PYTHONPATH=bench python3 - "$RUNS" "$gflops" "$RANKS" "$ROUNDS" <<'PY'
import json, sys
from side_by_side import medians
runs, gflops, ranks, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
med, per = medians(runs, ["pytorch", "mnist_ddp"])
ref = gflops * 1e9 / 16.4e6 * ranks
labels = {"pytorch": "PyTorch DDP (gloo)", "mnist_ddp": "mnist_ddp (MPI)"}
print()
print(f"{'':24}{'images/s':>12}{'ms/step':>10}{'test top-1':>12}   runs (median of {rounds} interleaved)")
for n, label in labels.items():
    p = per[n]
    note = f"{len(p['ok'])}/{rounds}" + (" failed (exit " + ", ".join(p["fail"]) + ")" if p["fail"] else "")
    if n not in med:
        print(f"{label:24}failed (exit {', '.join(p['fail'])})")
        continue
    m = med[n]
    print(f"{label:24}{m['images_per_s']:12.0f}{m['ms_per_step']:10.2f}{100 * m['top1']:11.2f}%   {note}")
out = {"rounds": rounds, "ranks": ranks, "sgemm_gflops": gflops, "gemm_reference_images_per_s": ref,
       "median": med, "runs": per}
if len(med) == 2:
    ratio = med["mnist_ddp"]["images_per_s"] / med["pytorch"]["images_per_s"]
    out["ratio"] = ratio
    print(f"ratio mnist_ddp / PyTorch: {ratio:.2f}x   accuracy difference: "
          f"{100 * (med['mnist_ddp']['top1'] - med['pytorch']['top1']):+.2f} points")
if ref > 0:
    print(f"GEMM-rate reference: {ref:.0f} images/s ({ranks} cores x {gflops:.1f} GFLOP/s SGEMM / "
          f"16.4 MFLOP; a reference, not a bound): " + ", ".join(
              f"{labels[n]} {100 * med[n]['images_per_s'] / ref:.1f}%" for n in labels if n in med))
json.dump(out, open(f"{runs}/../compare.json", "w"), indent=1)
PY
! awk -F'\t' '$3 != "0" { bad = 1 } END { exit !bad }' "$RUNS/manifest.tsv"
