#!/usr/bin/env bash
# accumulate_bench.sh — gradient accumulation's trade (--accumulate N): the same training
# (EPOCHS epochs, 2 CPU ranks, batch 100 per micro-batch) with N = 1, 2, 4 micro-batches per
# optimizer step, ROUNDS times each, interleaved (1, 2, 4, 1, 2, 4, ...) so the machine's drifts
# hit all alike; prints per N the median images/s, the ratio to N = 1 measured in the same run,
# and the gradient bytes each rank hands to all-reduce per image it trains on (from the comm
# record: payload / (steps x N x batch)), which falls as 1/N.
#   bench/accumulate_bench.sh [EPOCHS] [RANKS] [ROUNDS]      (defaults 1 2 3)
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-1}" RANKS="${2:-2}" ROUNDS="${3:-3}"
# shellcheck source=/dev/null
source tests/mpi_env.sh
[[ -x ./mnist_ddp ]] || make -j2 all >/dev/null
OUTDIR="bench/results/accumulate"
rm -rf "$OUTDIR" && mkdir -p "$OUTDIR"
for ((r = 1; r <= ROUNDS; r++)); do
  for n in 1 2 4; do
    mpirun -np "$RANKS" ./mnist_ddp --device cpu --data data/dataset --epochs "$EPOCHS" --progress off \
      --accumulate "$n" --checkpoint-dir "$OUTDIR/ckpt-$n-$r" --log-dir "$OUTDIR/log-$n-$r" >"$OUTDIR/$n-r$r.out" 2>&1
    echo "== round $r/$ROUNDS --accumulate $n: $(grep -o "at [0-9]* img/s" "$OUTDIR/$n-r$r.out")"
  done
done
python3 - "$OUTDIR" "$ROUNDS" <<'PY'
import json, re, statistics, sys
out, rounds, batch = sys.argv[1], int(sys.argv[2]), 100  # the default --batch-size
rows = {}
for n in (1, 2, 4):
    ips, per_image, top1 = [], [], []  # per round
    for r in range(1, rounds + 1):
        text = open(f"{out}/{n}-r{r}.out").read()
        ips.append(int(re.search(r"at (\d+) img/s", text).group(1)))
        top1.append(float(re.search(r"test top-1 ([0-9.]+)%", text).group(1)))
        recs = [json.loads(l) for l in open(f"{out}/log-{n}-{r}/metrics.jsonl")]
        comm = [c for c in recs if c.get("event") == "comm"]
        payload = sum(c["payload_bytes"] for c in comm)
        micro = sum(c["micro_batches"] for c in comm)
        per_image.append(payload / (micro * batch))
    rows[n] = (statistics.median(ips), statistics.median(per_image), statistics.median(top1))
base = rows[1][0]
print(f"\n{'--accumulate':>12} {'images/s':>10} {'vs N=1':>8} {'grad bytes/image/rank':>22} {'test top-1':>11}   (median of {rounds} interleaved)")
for n, (ips, bpi, top1) in rows.items():
    print(f"{n:>12} {ips:>10,.0f} {ips / base:>7.3f}x {bpi:>22,.1f} {top1:>10.2f}%")
PY
