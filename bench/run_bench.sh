#!/usr/bin/env bash
# run_bench.sh — `make bench`: the op microbenchmarks, then the side-by-side with PyTorch DDP.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
echo "== CPU op microbenchmarks (batch 100, 1 thread)"
build/bench/ops_bench --benchmark_min_time=0.3 | tee bench/results/ops_bench.txt
bench/compare_pytorch.sh "${BENCH_EPOCHS:-1}" "${BENCH_RANKS:-2}"
