#!/usr/bin/env bash
# slurm_test.sh — the Slurm workflows against a real Slurm started here (cluster.sh: munged,
# slurmctld, two slurmd "node1"/"node2" of 4 CPUs): `sbatch slurm/train_2x4.sh` (8 ranks on 2
# nodes, expected accuracy), the CPU-partition script, mpirun inside an allocation, an
# `salloc` + `srun` session, and srun without PMI caught by mnist_ddp's launcher check. Needs root
# (the daemons); every daemon started is stopped by its PID at exit. `make test-slurm`; part of
# `make test` when run as root.
source "$(dirname "$0")/../e2e/lib.sh"
source "$REPO/tests/slurm/cluster.sh"
DATA="$REPO/data/dataset"
if [[ $(id -u) -ne 0 ]]; then
  echo "skip - slurm tests (they start munged, slurmctld and slurmd: run as root)"
  exit 0
fi
for c in munged slurmctld slurmd sbatch salloc srun unshare runuser; do
  if ! command -v "$c" >/dev/null; then
    echo "skip - slurm tests ($c missing: tools/install-deps.sh installs Slurm when run as root)"
    exit 0
  fi
done
# The cluster's own scratch directory: traversable by the munge user (mktemp -d is 0700).
CL="$(mktemp -d /tmp/mnist_ddp_slurm.XXXXXX)" && chmod 755 "$CL"
trap 'cluster_stop; rm -rf "$TMP" "$CL"' EXIT
t0=$(date +%s.%N)
if ! cluster_start "$CL"; then
  fail "cluster_start" "$(tail -n 5 "$CL"/log/*.log "$CL"/munge/munged.log 2>&1)"
  exit 0
fi
pass "local_cluster_up (munged, slurmctld, slurmd node1+node2 idle in $(echo "$(date +%s.%N) - $t0" | bc | cut -c1-4) s)"
cd "$REPO" || exit 1
bar=80
grep -q "^mnist (" "$DATA/DATASET" && bar=95

# sbatch SCRIPT_OR_FLAGS... : submits from the checkout, waits, leaves the output in $OUT, the
# final state in $STATE.
submit() {
  local name="$1"; shift
  OUT="$TMP/$name.out"
  local id
  id=$(sbatch --parsable -o "$OUT" "$@" 2>"$TMP/$name.err") || { STATE="sbatch failed: $(cat "$TMP/$name.err")"; return; }
  STATE=$(job_wait "$id" 300)
}
top1() { grep -o "^done: .* test top-1 [0-9.]*%" "$OUT" | grep -o "[0-9.]*%$" | tr -d %; }
on_nodes() {  # ranks per host from the identity lines: "node1:4 node2:4"
  grep -o "^# rank [0-9]*/[0-9]* local [0-9]* host [a-z0-9]*" "$OUT" | awk '{print $7}' | sort | uniq -c |
    awk '{printf "%s%s:%s", sep, $2, $1; sep=" "}'
}

# 1. The GPU batch script as users submit it (GPUs are GRES here; the tasks find none: CPU).
export MNIST_DDP_CKPT="$TMP/ckpt1" MNIST_DDP_LOGS="$TMP/log1"
submit sbatch_2x4 slurm/train_2x4.sh --data "$DATA" --epochs 1 --progress off
acc=$(top1)
if [[ "$STATE" == COMPLETED ]] && grep -q "8 rank(s) on 2 node(s)" "$OUT" &&
   [[ "$(on_nodes)" == "node1:4 node2:4" ]] && [[ -n "$acc" ]] && (($(echo "$acc >= $bar" | bc))); then
  pass "sbatch_train_2x4_8_ranks_on_2_nodes (top-1 ${acc}%, $(on_nodes), module loaded, srun --mpi=pmix)"
else
  fail "sbatch_train_2x4 state=$STATE top1=$acc nodes=$(on_nodes)" "$(tail -n 15 "$OUT" "$TMP/sbatch_2x4.err" 2>&1)"
fi

# 2. The CPU-partition variant.
export MNIST_DDP_CKPT="$TMP/ckpt2" MNIST_DDP_LOGS="$TMP/log2"
submit sbatch_cpu slurm/train_cpu_2x4.sh --data "$DATA" --epochs 1 --max-steps 10 --progress off
if [[ "$STATE" == COMPLETED ]] && grep -q "8 rank(s) on 2 node(s), device cpu" "$OUT" &&
   grep -q "^done: 10 steps" "$OUT"; then
  pass "sbatch_train_cpu_2x4"
else
  fail "sbatch_train_cpu_2x4 state=$STATE" "$(tail -n 15 "$OUT" 2>&1)"
fi
unset MNIST_DDP_CKPT MNIST_DDP_LOGS

# 3. mpirun inside an allocation (Open MPI reads the allocation and starts its daemons by srun).
submit mpirun_in_alloc -N2 --ntasks-per-node=4 --wrap "mpirun ./mnist_ddp --data $DATA --epochs 1 --max-steps 10 --progress off --log-dir $TMP/log3 --checkpoint-dir $TMP/ckpt3"
if [[ "$STATE" == COMPLETED ]] && grep -q "8 rank(s) on 2 node(s)" "$OUT" &&
   [[ "$(on_nodes)" == "node1:4 node2:4" ]] && grep -q "^done: 10 steps" "$OUT"; then
  pass "mpirun_inside_an_allocation ($(on_nodes))"
else
  fail "mpirun_inside_an_allocation state=$STATE nodes=$(on_nodes)" "$(tail -n 15 "$OUT" 2>&1)"
fi

# 4. An interactive-style session: salloc, then srun steps in it.
run salloc_srun 180 salloc -N2 -n4 bash -c "srun --mpi=pmix ./mnist_ddp --print-env && srun --mpi=pmix ./mnist_ddp --data $DATA --epochs 1 --max-steps 5 --progress off --log-dir $TMP/log4 --checkpoint-dir $TMP/ckpt4"
if [[ $RC -eq 0 ]] && [[ $(grep -c "launcher: srun (SLURM_PROCID=[0-3] agrees)" "$OUT") -eq 4 ]] &&
   grep -q "4 rank(s) on 2 node(s)" "$OUT" && grep -q "^done: 5 steps" "$OUT"; then
  pass "salloc_then_srun_session (--print-env from 4 tasks, then a 2-node run)"
else
  fail "salloc_then_srun_session rc=$RC" "$(show)"
fi

# 5. srun without an MPI bootstrap: every task says why and exits 2 (not an MPI_Init abort).
run srun_without_pmi 120 salloc -N1 -n2 srun --mpi=none ./mnist_ddp --data "$DATA" --epochs 1
if [[ $RC -ne 0 ]] && [[ $(grep -c "without an MPI bootstrap (--mpi=none" "$ERR") -eq 2 ]] &&
   grep -q "Exited with exit code 2" "$ERR" && grep -q "srun --mpi=pmix" "$ERR"; then
  pass "srun_without_pmi_is_caught_with_its_message"
else
  fail "srun_without_pmi rc=$RC" "$(show)"
fi
