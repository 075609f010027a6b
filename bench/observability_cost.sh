#!/usr/bin/env bash
# observability_cost.sh — what the always-on flight recorder costs (target: <= 1% of
# throughput). Two measurements in one run:
#  1. the job: mnist_ddp on RANKS CPU ranks for EPOCHS epochs with --flight-recorder 0 (off) and
#     with the default ring (on), ROUNDS times each, interleaved in ABBA order (bench/on_off_lib.sh) so the
#     machine's drifts hit both alike; prints the median images/s of each and the ratio on/off.
#     On 2 shared cores run-to-run noise is a few percent, so this bounds the cost only coarsely;
#  2. the mechanism: comm_bench's BM_FlightRecord (ns to record one collective) x the collectives
#     one training step issues (counted from a real dump: the collectives of step 2 in rank 0's
#     recorder, dumped by its watchdog) / the measured time per step: the cost as a fraction of a
#     step, resolved far below the noise of (1).
#   bench/observability_cost.sh [EPOCHS] [RANKS] [ROUNDS]      (defaults 1 2 5)
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-1}" RANKS="${2:-2}" ROUNDS="${3:-5}"
source bench/on_off_lib.sh
on_off_setup observability
flags_for() { FLAGS=(--flight-recorder 2000); [[ $1 == off ]] && FLAGS=(--flight-recorder 0); return 0; }
run_on_off
off=$OFF on=$ON

# (2) The mechanism's cost.
ns=$(mpirun -np 1 build/bench/comm_bench --benchmark_filter=BM_FlightRecord --benchmark_format=csv 2>/dev/null |
  awk -F, '/BM_FlightRecord/ { print $4 }')
mpirun -np "$RANKS" ./mnist_ddp "${COMMON[@]}" --max-steps 20 --debug-hang-rank 1 --collective-timeout 2 \
  --log-dir "$OUTDIR/count" --checkpoint-dir "$OUTDIR/ckpt-count" >"$OUTDIR/count.out" 2>&1 || true
per_step=$(python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
print(sum(1 for c in d['communicators'] for e in c['entries'] if e['step'] == 2))" "$OUTDIR/count/flight-rank0.json")
ms_step=$(awk -v ips="$on" -v r="$RANKS" 'BEGIN { printf "%.3f", 100 * r / ips * 1000 }')

printf '\n%-34s %10s\n' "" "images/s (median of $ROUNDS interleaved)"
printf '%-34s %10s\n' "--flight-recorder 0 (off)" "$off" "--flight-recorder 2000 (default)" "$on"
awk -v a="$on" -v b="$off" 'BEGIN { printf "ratio on / off: %.4f (%+.2f%%; run-to-run noise on 2 shared cores is a few %%)\n", a / b, (a / b - 1) * 100 }'
awk -v ns="$ns" -v n="$per_step" -v ms="$ms_step" 'BEGIN {
  printf "mechanism: %.1f ns per recorded collective x %d collectives per step / %.3f ms per step = %.5f%% of a step\n",
         ns, n, ms, ns * n / (ms * 1e6) * 100 }'
