# side_by_side_lib.sh — shared by the benchmarks that train PyTorch DDP and mnist_ddp side by side
# on the CPU (compare_pytorch.sh, compare_precision.sh): one training run of either, on the same
# data, batch 100 per rank, SGD(lr 0.01, momentum 0.9), RANKS ranks x 1 thread under the same
# mpirun, recorded in RUNS/manifest.tsv (name, round, exit status, folder) for side_by_side.py.
#   source bench/side_by_side_lib.sh
#   train_run NAME ROUND IMPL AMP   # IMPL pytorch | mnist_ddp; AMP off | bf16
# Needs RUNS, DATA, EPOCHS, RANKS set; runs from the repository root.
# shellcheck source=/dev/null
source tests/mpi_env.sh
SIDE_BY_SIDE_PORT=${SIDE_BY_SIDE_PORT:-29600}

train_run() {
  local name="$1" round="$2" impl="$3" amp="$4" dir rc
  dir="$RUNS/$name-r$round"
  mkdir -p "$dir"
  echo "== round $round: $name, ${RANKS} ranks x 1 thread, ${EPOCHS} epoch(s)"
  SIDE_BY_SIDE_PORT=$((SIDE_BY_SIDE_PORT + 1))
  if [[ $impl == pytorch ]]; then
    MASTER_PORT=$SIDE_BY_SIDE_PORT timeout 1800 mpirun -np "$RANKS" /usr/bin/python3 bench/pytorch_ddp.py \
      --data "$DATA" --epochs "$EPOCHS" --threads 1 --amp "$amp" >"$dir/stdout" 2>"$dir/stderr"
  else
    timeout 1800 mpirun -np "$RANKS" ./mnist_ddp --device cpu --data "$DATA" --epochs "$EPOCHS" --threads 1 \
      --lr 0.01 --momentum 0.9 --amp "$amp" --progress off --log-dir "$dir" --checkpoint-dir "$dir/ckpt" \
      >"$dir/stdout" 2>"$dir/stderr"
  fi
  rc=$?
  rm -rf "$dir/ckpt"
  printf '%s\t%s\t%s\t%s\n' "$name" "$round" "$rc" "$dir" >>"$RUNS/manifest.tsv"
  if ((rc == 0)); then tail -n 1 "$dir/stdout" | cut -c1-160; else echo "   exit $rc: $(tail -n 2 "$dir/stderr" | tr '\n' ' ' | cut -c1-200)"; fi
}
