#!/usr/bin/env bash
# straggler_cost.sh — what straggler detection costs (target: <= 1% of throughput). mnist_ddp on
# RANKS CPU ranks for EPOCHS epochs with --straggler-every 0 (off) and with the default window
# (on: every --log-every 50 steps one allgather of 8 doubles a rank, plus a few host stores per
# step), ROUNDS times each, interleaved in ABBA order (bench/on_off_lib.sh); prints the median
# images/s of each and the ratio on/off. Also the worst case, a window every 5 steps.
#   bench/straggler_cost.sh [EPOCHS] [RANKS] [ROUNDS]      (defaults 1 2 6)
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-1}" RANKS="${2:-2}" ROUNDS="${3:-6}"
source bench/on_off_lib.sh
on_off_setup stragglers
flags_for() { FLAGS=(--straggler-every 0); [[ $1 == on ]] && FLAGS=(); return 0; }
run_on_off
off=$OFF on=$ON
flags_for() { FLAGS=(--straggler-every 0); [[ $1 == on ]] && FLAGS=(--straggler-every 5); return 0; }
run_on_off
off5=$OFF on5=$ON
printf '\n%-52s %10s\n' "" "images/s (median of $ROUNDS interleaved)"
printf '%-52s %10s\n' "--straggler-every 0 (off)" "$off" "default window (every --log-every 50 steps)" "$on"
awk -v a="$on" -v b="$off" 'BEGIN { printf "ratio on / off: %.4f (%+.2f%%)\n", a / b, (a / b - 1) * 100 }'
printf '%-52s %10s\n' "--straggler-every 0 (off, second series)" "$off5" "--straggler-every 5 (a window every 5 steps)" "$on5"
awk -v a="$on5" -v b="$off5" 'BEGIN { printf "ratio every-5 / off: %.4f (%+.2f%%)\n", a / b, (a / b - 1) * 100 }'
