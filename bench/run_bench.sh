#!/usr/bin/env bash
# run_bench.sh — `make bench`: the op microbenchmarks, then the side-by-side with PyTorch DDP.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
echo "== CPU op microbenchmarks (batch 100, 1 thread)"
build/bench/ops_bench --benchmark_min_time=0.3 | tee bench/results/ops_bench.txt
echo "== communication: all-reduce algbw/busbw (MPI; NCCL on a GPU machine), hook costs (2 ranks)"
# shellcheck source=/dev/null
source tests/mpi_env.sh
mpirun -np "${BENCH_RANKS:-2}" build/bench/comm_bench | tee bench/results/comm_bench.txt
echo "== overlap: exposed communication per engine (median of 3 runs)"
bench/overlap_compare.sh 3 2 "${BENCH_RANKS:-2}" | tee bench/results/overlap.txt
bench/compare_pytorch.sh "${BENCH_EPOCHS:-1}" "${BENCH_RANKS:-2}"
