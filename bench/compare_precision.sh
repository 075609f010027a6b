#!/usr/bin/env bash
# compare_precision.sh — fp32 against bf16 on the CPU, ours and PyTorch's: mnist_ddp fp32 and
# --amp bf16, PyTorch DDP (gloo) fp32 and with torch.autocast("cpu", dtype=torch.bfloat16); same
# ConvNet, data, batch 100 per rank, SGD(lr 0.01, momentum 0.9), RANKS ranks x 1 thread, launched
# by the same mpirun. Each of the four runs ROUNDS times (default 3), interleaved, and the table
# shows the MEDIAN images/s and ms per step, each row's test top-1, and its fraction of a GEMM-rate
# reference of its precision (16.4 MFLOP per image over RANKS x one core's rate: OpenBLAS SGEMM for
# fp32, oneDNN's bf16 matmul for bf16, both at 1024^3; a reference, not a bound). The header names
# the CPU and its instruction sets; the last line is `ratio=R bf16=B fp32=F img/s` (ours bf16 over
# ours fp32). Without bf16 units (neither AVX512-BF16 nor AMX-BF16) the bf16 rows say so and the
# ratio is "n/a". A failing run leaves "failed (exit N)" in its row; the table always prints.
#   bench/compare_precision.sh [EPOCHS] [RANKS] [ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
source bench/side_by_side_lib.sh
EPOCHS="${1:-1}"
RANKS="${2:-2}"
ROUNDS="${3:-3}"
for v in "$EPOCHS" "$RANKS" "$ROUNDS"; do
  if [[ ! $v =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: bench/compare_precision.sh [EPOCHS] [RANKS] [ROUNDS] (positive whole numbers; got '$v')" >&2
    exit 2
  fi
done
DATA=data/dataset
RUNS="bench/results/precision_runs"
[[ -x ./mnist_ddp && -x build/bench/ops_bench ]] || { echo "compare_precision: run 'make test-build' first (./mnist_ddp, build/bench/ops_bench)" >&2; exit 2; }
rm -rf "$RUNS" && mkdir -p "$RUNS" || exit 1
: >"$RUNS/manifest.tsv"

flags=$(grep -m1 '^flags' /proc/cpuinfo)
isa=$(for f in avx2 avx512f avx512_bf16 amx_bf16; do grep -qw "$f" <<<"$flags" && printf '%s ' "$f"; done)
echo "== CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') (family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')), ${isa:-no AVX2}"
# The bf16 units as mnist_ddp sees them (oneDNN's dispatch; ONEDNN_MAX_CPU_ISA counts): one step.
probe=$(timeout 300 mpirun -np 1 ./mnist_ddp --device cpu --data "$DATA" --amp bf16 --max-steps 1 --progress off \
  --log-dir "$RUNS/probe" --checkpoint-dir "$RUNS/probe/ckpt" 2>&1)
units=$(grep -m1 -o -- "--amp bf16 on [A-Z0-9-]*" <<<"$probe" | sed 's/.* on //')
kernels=$(grep -m1 -o "oneDNN kernels (--amp bf16 [^)]*): [^)]*" <<<"$probe")
rm -rf "$RUNS/probe"
echo "   bf16 units: ${units:-none}${kernels:+ ($kernels)}"
units=${units:-none}

# rate BENCHMARK: one core's GFLOP/s for a Google Benchmark of ops_bench (0 when skipped).
rate() {
  env -u OPENBLAS_CORETYPE build/bench/ops_bench --benchmark_filter="$1" --benchmark_min_time=1 \
    --benchmark_format=json 2>/dev/null | python3 -c \
    'import json,sys; b=json.load(sys.stdin)["benchmarks"][0]; print(b.get("GFLOP/s", 0)/1e9 if not b.get("error_occurred") else 0)' 2>/dev/null || echo 0
}
fp32_gflops=$(rate 'BM_Sgemm/1024$')
bf16_gflops=$(rate 'BM_Bf16Matmul/1024$')
echo "== GEMM rates, one core: fp32 SGEMM ${fp32_gflops} GFLOP/s, bf16 matmul ${bf16_gflops} GFLOP/s"

for ((r = 1; r <= ROUNDS; r++)); do
  for v in pytorch-fp32 mnist_ddp-fp32 pytorch-bf16 mnist_ddp-bf16; do
    amp=off
    [[ ${v#*-} == bf16 ]] && amp=bf16
    if [[ $amp == bf16 && $units == none ]]; then
      printf '%s\t%s\t%s\t%s\n' "$v" "$r" "no-units" "-" >>"$RUNS/manifest.tsv"
      continue
    fi
    train_run "$v" "$r" "${v%-*}" "$amp"
  done
done

PYTHONPATH=bench python3 - "$RUNS" "$fp32_gflops" "$bf16_gflops" "$RANKS" "$ROUNDS" <<'PY'
import json, sys
from side_by_side import medians
runs, g32, g16, ranks, rounds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
names = ["mnist_ddp-fp32", "mnist_ddp-bf16", "pytorch-fp32", "pytorch-bf16"]
labels = {"mnist_ddp-fp32": "mnist_ddp fp32", "mnist_ddp-bf16": "mnist_ddp --amp bf16",
          "pytorch-fp32": "PyTorch DDP fp32", "pytorch-bf16": "PyTorch DDP autocast bf16"}
med, per = medians(runs, names)
ref = {"fp32": g32 * 1e9 / 16.4e6 * ranks, "bf16": g16 * 1e9 / 16.4e6 * ranks}
print()
print(f"{'':28}{'images/s':>10}{'ms/step':>9}{'top-1':>8}{'of ref.':>9}   runs (median of {rounds} interleaved)")
for n in names:
    p, label = per[n], labels[n]
    if p.get("skipped"):
        print(f"{label:28}not run: no bf16 units for oneDNN on this CPU")
        continue
    if n not in med:
        print(f"{label:28}failed (exit {', '.join(p['fail'])})")
        continue
    m, r = med[n], ref[n.split("-")[1]]
    share = f"{100 * m['images_per_s'] / r:8.1f}%" if r > 0 else "     n/a"
    note = f"{len(p['ok'])}/{rounds}" + (" failed (exit " + ", ".join(p["fail"]) + ")" if p["fail"] else "")
    print(f"{label:28}{m['images_per_s']:10.0f}{m['ms_per_step']:9.2f}{100 * m['top1']:7.2f}%{share}   {note}")
print(f"GEMM-rate references ({ranks} cores x one core's rate / 16.4 MFLOP per image): fp32 {ref['fp32']:.0f} "
      f"images/s (SGEMM {g32:.1f} GFLOP/s), bf16 {ref['bf16']:.0f} images/s (bf16 matmul {g16:.1f} GFLOP/s)")
get = lambda n: med.get(n, {}).get("images_per_s")
if get("pytorch-bf16") and get("mnist_ddp-bf16"):
    print(f"mnist_ddp bf16 / PyTorch autocast bf16: {get('mnist_ddp-bf16') / get('pytorch-bf16'):.2f}x")
if get("pytorch-fp32") and get("mnist_ddp-fp32"):
    print(f"mnist_ddp fp32 / PyTorch fp32: {get('mnist_ddp-fp32') / get('pytorch-fp32'):.2f}x")
json.dump({"rounds": rounds, "ranks": ranks, "sgemm_gflops": g32, "bf16_matmul_gflops": g16,
           "reference_images_per_s": ref, "median": med, "runs": per},
          open(f"{runs}/../precision.json", "w"), indent=1)
b, f = get("mnist_ddp-bf16"), get("mnist_ddp-fp32")
show = lambda v: f"{v:.0f}" if v else "n/a"
print(f"ratio={b / f:.2f}" if b and f else "ratio=n/a", f"bf16={show(b)} fp32={show(f)} img/s")
# A run that exited 0 without a result is a failure too.
sys.exit(1 if any(p["fail"] for p in per.values()) else 0)
PY
