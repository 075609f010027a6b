#!/usr/bin/env bash
# trace_cost.sh — what the timeline (--trace) costs (targets: on <= 3% of throughput; off
# unmeasurable). Two measurements in one run:
#  1. the job: mnist_ddp on RANKS CPU ranks for EPOCHS epochs without --trace (off) and with
#     --trace over every step (on: --trace-steps 0:1000000000, the worst case; the default window
#     traces 50 steps), ROUNDS times each, interleaved in ABBA order (bench/on_off_lib.sh) so the machine's drifts
#     hit both alike; prints the median images/s of each and the ratio on/off. On 2 shared cores
#     run-to-run noise is a few percent, so this bounds the cost only coarsely;
#  2. the mechanism: comm_bench's BM_TraceSpan (ns per span, off and on) x the spans one training
#     step records (counted in the trace of (1)) / the measured time per step: the cost as a
#     fraction of a step, resolved far below the noise of (1).
#   bench/trace_cost.sh [EPOCHS] [RANKS] [ROUNDS]      (defaults 1 2 5)
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-1}" RANKS="${2:-2}" ROUNDS="${3:-5}"
source bench/on_off_lib.sh
on_off_setup trace
flags_for() { FLAGS=(); [[ $1 == on ]] && FLAGS=(--trace "$OUTDIR/trace-r$2.json" --trace-steps 0:1000000000); return 0; }
run_on_off
off=$OFF on=$ON

# (2) The mechanism's cost: spans per step from the trace itself (rank 0, both tracks).
read -r ns_off ns_on < <(mpirun -np 1 build/bench/comm_bench --benchmark_filter=BM_TraceSpan --benchmark_format=csv 2>/dev/null |
  awk -F, '/BM_TraceSpan\/0/ { off = $4 } /BM_TraceSpan\/1/ { on = $4 } END { print off, on }')
read -r per_step steps < <(python3 -c "
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))['traceEvents'] if e.get('pid') == 0 and e['ph'] == 'X']
steps = sum(1 for e in ev if e['name'] == 'step')
print(round(sum(1 for e in ev if 'step' in e['args'] and e['name'] not in ('evaluate', 'checkpoint')) / steps), steps)" "$OUTDIR/trace-r1.json")
ms_step=$(awk -v ips="$on" -v r="$RANKS" 'BEGIN { printf "%.3f", 100 * r / ips * 1000 }')

printf '\n%-44s %10s\n' "" "images/s (median of $ROUNDS interleaved)"
printf '%-44s %10s\n' "no --trace (off)" "$off" "--trace, every step traced ($steps steps)" "$on"
awk -v a="$on" -v b="$off" 'BEGIN { printf "ratio on / off: %.4f (%+.2f%%; run-to-run noise on 2 shared cores is a few %%)\n", a / b, (a / b - 1) * 100 }'
awk -v off="$ns_off" -v on="$ns_on" -v n="$per_step" -v ms="$ms_step" 'BEGIN {
  printf "mechanism, on:  %.1f ns per span x %d spans per step / %.3f ms per step = %.4f%% of a step\n", on, n, ms, on * n / (ms * 1e6) * 100
  printf "mechanism, off: %.2f ns per span x %d spans per step / %.3f ms per step = %.6f%% of a step\n", off, n, ms, off * n / (ms * 1e6) * 100 }'
