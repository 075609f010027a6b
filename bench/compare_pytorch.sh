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
source tests/mpi_env.sh
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

port=29600
for ((r = 1; r <= ROUNDS; r++)); do
  for v in pytorch mnist_ddp; do
    dir="$RUNS/$v-r$r"
    mkdir -p "$dir"
    echo "== round $r/$ROUNDS: $v, ${RANKS} ranks x 1 thread, ${EPOCHS} epoch(s)"
    port=$((port + 1))
    if [[ $v == pytorch ]]; then
      MASTER_PORT=$port timeout 1800 mpirun -np "$RANKS" /usr/bin/python3 bench/pytorch_ddp.py \
        --data "$DATA" --epochs "$EPOCHS" --threads 1 >"$dir/stdout" 2>"$dir/stderr"
    else
      timeout 1800 mpirun -np "$RANKS" ./mnist_ddp --device cpu --data "$DATA" --epochs "$EPOCHS" --threads 1 \
        --lr 0.01 --momentum 0.9 --progress off --log-dir "$dir" --checkpoint-dir "$dir/ckpt" \
        >"$dir/stdout" 2>"$dir/stderr"
    fi
    rc=$?
    rm -rf "$dir/ckpt"
    printf '%s\t%s\t%s\t%s\n' "$v" "$r" "$rc" "$dir" >>"$RUNS/manifest.tsv"
    if ((rc == 0)); then tail -n 1 "$dir/stdout" | cut -c1-160; else echo "   exit $rc: $(tail -n 2 "$dir/stderr" | tr '\n' ' ' | cut -c1-200)"; fi
  done
done

python3 - "$RUNS" "$gflops" "$RANKS" "$ROUNDS" <<'PY'
import json, statistics, sys
runs, gflops, ranks, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def result(name, d):
    try:
        if name == "pytorch":
            r = json.loads([l for l in open(f"{d}/stdout") if l.startswith("{")][-1])
        else:
            r = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if '"done"' in l][-1]
        steps = r.get("steps") or 0
        return {"images_per_s": r["images_per_s"], "train_s": r["train_s"], "top1": r["top1"],
                "ms_per_step": 1e3 * r["train_s"] / steps if steps else float("nan")}
    except Exception:
        return None

per = {"pytorch": {"ok": [], "fail": []}, "mnist_ddp": {"ok": [], "fail": []}}
for line in open(f"{runs}/manifest.tsv"):
    name, rnd, rc, d = line.rstrip("\n").split("\t")
    r = result(name, d) if rc == "0" else None
    if r is None:
        per[name]["fail"].append(rc if rc != "0" else "0, no result")
    else:
        per[name]["ok"].append(r)
med = {n: {k: statistics.median(x[k] for x in p["ok"]) for k in p["ok"][0]}
       for n, p in per.items() if p["ok"]}
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
