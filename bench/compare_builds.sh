#!/usr/bin/env bash
# compare_builds.sh — the same training job with two builds of mnist_ddp (before and after a
# change that must not cost throughput): RANKS CPU ranks for EPOCHS epochs, ROUNDS runs of each,
# interleaved in ABBA order (A, B, B, A, ...) so drifts of the machine hit both alike; prints
# whether the two trained the same bits (the final checkpoints' model and optimizer state, h5diff:
# a refactoring must not change them; exit 1 when they differ), the same for 80 steps under each of
# a list of flag sets that take other paths (accumulation, SyncBN with --keep-best, PowerSGD, the
# communication thread, post-local SGD, 16-bit hooks, --amp bf16 where the CPU has the units,
# --no-overlap on the reference kernels), the median images/s of each and the ratio B / A as its
# last line.
#   bench/compare_builds.sh BINARY_A BINARY_B [EPOCHS] [RANKS] [ROUNDS]      (defaults 1 2 6)
# e.g. a build of the previous commit: git worktree add /tmp/before HEAD~1 && make -C /tmp/before
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 2 || ! -x "$1" || ! -x "$2" ]]; then
  echo "usage: bench/compare_builds.sh BINARY_A BINARY_B [EPOCHS] [RANKS] [ROUNDS] (two executable mnist_ddp builds)" >&2
  exit 2
fi
A="$1" B="$2" EPOCHS="${3:-1}" RANKS="${4:-2}" ROUNDS="${5:-6}"
source tests/mpi_env.sh
OUTDIR=bench/results/compare_builds
rm -rf "$OUTDIR" && mkdir -p "$OUTDIR"
ips() { grep -o "at [0-9]* img/s" "$1" | grep -o "[0-9]*"; }
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for ((r = 1; r <= ROUNDS; r++)); do
  order=(a b)
  ((r % 2 == 0)) && order=(b a)
  for which in "${order[@]}"; do
    bin=$A
    [[ $which == b ]] && bin=$B
    log="$OUTDIR/$which-r$r.out"
    mpirun -np "$RANKS" "$bin" --device cpu --data data/dataset --epochs "$EPOCHS" --progress off \
      --log-dir "$OUTDIR/log-$which-r$r" --checkpoint-dir "$OUTDIR/ckpt-$which-r$r" >"$log" 2>&1
    echo "== round $r/$ROUNDS $which: $(ips "$log") img/s"
  done
done
# The same job with the same seed: a change that is not meant to change the numbers trains the
# same bits (every round of each binary too: the CPU path is deterministic).
final() { ls "$OUTDIR/ckpt-$1"/ckpt-*.h5 | grep -v best | sort | tail -1; }
same=1
for ((r = 1; r <= ROUNDS; r++)); do
  for group in /model /optimizer; do
    h5diff -q "$(final a-r1)" "$(final "b-r$r")" "$group" "$group" >/dev/null 2>&1 || same=0
  done
done
if ((same)); then
  echo "checkpoints: identical model and optimizer state (h5diff of $(basename "$(final a-r1)"), every round)"
else
  echo "checkpoints: A and B trained different bits ($(final a-r1) against B's); not a refactoring"
fi
# The other paths: each flag set trained by both, 80 steps, the final checkpoints compared.
while IFS= read -r flags; do
  [[ $flags == *"--amp bf16"* ]] && ! grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo && continue
  for which in a b; do
    bin=$A
    [[ $which == b ]] && bin=$B
    dir="$OUTDIR/paths-$which"
    rm -rf "$dir" "$OUTDIR/ckpt-paths-$which"
    mpirun -np "$RANKS" "$bin" --device cpu --data data/dataset --epochs 1 --max-steps 80 \
      --progress off --log-dir "$dir/log" --checkpoint-dir "$OUTDIR/ckpt-paths-$which" $flags \
      >"$dir.out" 2>&1 </dev/null
  done
  verdict="identical"
  for group in /model /optimizer; do
    h5diff -q "$(final paths-a)" "$(final paths-b)" "$group" "$group" >/dev/null 2>&1 ||
      verdict="DIFFERENT" same=0
  done
  echo "checkpoints: $verdict after 80 steps with $flags"
done <<'FLAGS'
--accumulate 2 --batch-size 50
--sync-bn --eval-every 30 --keep-best
--compression powersgd --powersgd-start-iter 10
--overlap-engine thread
--local-sgd-start 20 --local-sgd-period 4
--compression bf16 --lr-schedule cosine --warmup-steps 10
--amp bf16
--no-overlap --checkpoint-every 25 --cpu-kernels reference
FLAGS
a=$(for f in "$OUTDIR"/a-r*.out; do ips "$f"; done | median)
b=$(for f in "$OUTDIR"/b-r*.out; do ips "$f"; done | median)
printf '%-10s %10s  %s\n' "A" "$a" "$A" "B" "$b" "$B"
awk -v a="$a" -v b="$b" 'BEGIN { printf "ratio B / A: %.4f (%+.2f%%), images/s median of each\n", b / a, (b / a - 1) * 100 }'
((same)) || exit 1
