#!/usr/bin/env bash
# overlap_compare.sh — how much gradient communication backward hides, per engine, measured in
# one run: --no-overlap (one all-reduce after backward), --overlap-engine poll (MPI_Iallreduce +
# MPI_Test from backward) and --overlap-engine thread (a communication thread). Each mode runs
# REPEATS times (default 3) for EPOCHS epochs (default 2) on RANKS ranks (default 2); prints the
# median per-epoch exposed communication (ms the step waited after backward), in-flight time and
# images/s, from the runs' metrics.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS="${1:-3}" EPOCHS="${2:-2}" RANKS="${3:-2}"
OUTD="${OUT:-bench/results}/overlap"
rm -rf "$OUTD" && mkdir -p "$OUTD"
# shellcheck source=/dev/null
source tests/mpi_env.sh
modes=("no_overlap:--no-overlap" "poll:--overlap-engine poll" "thread:--overlap-engine thread")
for ((i = 0; i < REPEATS; i++)); do
  for m in "${modes[@]}"; do
    name=${m%%:*}
    # shellcheck disable=SC2086
    mpirun -np "$RANKS" ./mnist_ddp --epochs "$EPOCHS" ${m#*:} --progress off \
      --log-dir "$OUTD/$name-$i" --checkpoint-dir "$OUTD/ckpt-$name-$i" >/dev/null
  done
done
python3 - "$OUTD" "$REPEATS" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
print(f"{'mode':12} {'exposed ms/epoch':>17} {'in flight ms/epoch':>19} {'img/s':>8}   (median of {reps} runs)")
for name in ("no_overlap", "test", "thread"):
    exposed, flight, ips = [], [], []
    for i in range(reps):
        recs = [json.loads(l) for l in open(f"{out}/{name}-{i}/metrics.jsonl")]
        comm = [r for r in recs if r.get("event") == "comm"]
        exposed += [1e3 * r["exposed_s"] for r in comm]
        flight += [1e3 * r["comm_s"] for r in comm]
        ips += [r["images_per_s"] for r in recs if r.get("event") == "done"]
    print(f"{name:12} {statistics.median(exposed):17.1f} {statistics.median(flight):19.1f} {statistics.median(ips):8.0f}")
PY
