# on_off_lib.sh — shared by the "what does feature X cost" benchmarks (observability_cost.sh,
# trace_cost.sh): a job run with the feature off and on, ROUNDS times each, interleaved in ABBA
# order (off, on, on, off, off, on, ...) so the machine's drifts and any cost of running first or
# second (page cache, CPU frequency) hit both alike, and the median images/s of each.
#   source bench/on_off_lib.sh; on_off_setup NAME     # sets OUTDIR (bench/results/NAME), COMMON
#   flags_for() { ...; }                              # MODE ROUND -> the flags in FLAGS (array)
#   run_on_off                                        # sets OFF and ON (median images/s)
# Needs EPOCHS, RANKS, ROUNDS set; runs from the repository root.
# shellcheck source=/dev/null
source tests/mpi_env.sh

on_off_setup() {
  [[ -x ./mnist_ddp && -x build/bench/comm_bench ]] || make -j2 all build/bench/comm_bench >/dev/null
  OUTDIR="bench/results/$1"
  rm -rf "$OUTDIR" && mkdir -p "$OUTDIR"
  COMMON=(--device cpu --data data/dataset --epochs "$EPOCHS" --progress off)
}
ips() { grep -o "at [0-9]* img/s" "$1" | grep -o "[0-9]*"; }
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

run_on_off() {
  local r mode log order
  for ((r = 1; r <= ROUNDS; r++)); do
    order=(off on)
    ((r % 2 == 0)) && order=(on off)
    for mode in "${order[@]}"; do
      flags_for "$mode" "$r"
      log="$OUTDIR/$mode-r$r.out"
      # A fresh checkpoint directory per run: each run is a new lineage, and a directory holding
      # another run's checkpoints is refused (docs/slurm.md).
      rm -rf "$OUTDIR/ckpt-$mode-r$r"
      mpirun -np "$RANKS" ./mnist_ddp "${COMMON[@]}" "${FLAGS[@]}" --log-dir "$OUTDIR/log-$mode-r$r" \
        --checkpoint-dir "$OUTDIR/ckpt-$mode-r$r" >"$log" 2>&1
      echo "== round $r/$ROUNDS $mode: $(ips "$log") img/s"
    done
  done
  OFF=$(for f in "$OUTDIR"/off-r*.out; do ips "$f"; done | median)
  ON=$(for f in "$OUTDIR"/on-r*.out; do ips "$f"; done | median)
}
