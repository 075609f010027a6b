#!/usr/bin/env bash
# tests/mpich/e2e_test.sh — the MPICH build (build/mpich/mnist_ddp, tests/mpich/run.sh builds it)
# end to end under MPICH's mpiexec (Hydra): rank and local rank derived from Hydra's variables;
# 2-rank training that equals the Open MPI build's bit for bit (with two ranks a sum is one
# addition, the same in any MPI); a stop and resume that equals the uninterrupted run bit for bit;
# the refusals as one clean exit (no flight dump from the rank the launcher ends); the launcher-
# mismatch checks in both directions (an MPICH binary under Open MPI's mpirun, an Open MPI binary
# under mpiexec.hydra); and on the local Slurm (as root), srun --mpi=pmi2.
source "$(dirname "$0")/../e2e/lib.sh"
MB="$REPO/build/mpich/mnist_ddp"
OB="$REPO/mnist_ddp"
HYDRA=(timeout --kill-after=10 120 mpiexec.mpich)
DATA="$(small_data)"
COMMON=(--device cpu --data "$DATA" --progress off --batch-size 100)
same_state() { h5diff -q "$1" "$2" /model /model >/dev/null && h5diff -q "$1" "$2" /optimizer /optimizer >/dev/null; }
if [[ ! -x "$MB" ]]; then
  fail "mpich_binary: $MB not built (tests/mpich/run.sh builds it)"
  finish
fi

# 1. Identity under Hydra: both ranks, the launcher and local rank from its own variables.
run hydra_env 60 mpiexec.mpich -n 2 "$MB" --print-env
if [[ $RC -eq 0 ]] && [[ $(grep -c "launcher: mpiexec (Hydra) (PMI_RANK=[01] agrees)" "$OUT") == 2 ]] &&
   grep -q "^\[rank 1\] local_rank: MPI_LOCALRANKID = 1" "$OUT" && grep -q "mpi: MPICH" "$OUT"; then
  pass "hydra_rank_and_local_rank ($(grep -m1 -o 'mpi: MPICH[^,]*' "$OUT" | head -c 40))"
else
  fail "hydra_env rc=$RC" "$(show)"
fi

# 2. Training: 30 steps, a checkpoint, and the same bytes as the Open MPI build's.
run hydra_train 300 "${HYDRA[@]}" -n 2 "$MB" "${COMMON[@]}" --max-steps 30 --checkpoint-dir "$TMP/m" --log-dir "$TMP/m.l"
run ompi_train 300 mpirun -np 2 "$OB" "${COMMON[@]}" --max-steps 30 --checkpoint-dir "$TMP/o" --log-dir "$TMP/o.l"
m=$TMP/m/ckpt-00000030.h5 o=$TMP/o/ckpt-00000030.h5
if [[ -f $m && -f $o ]] && grep -q "^done: 30 steps" "$TMP/hydra_train.out" && same_state "$m" "$o"; then
  pass "hydra_training_equals_open_mpi_bit_for_bit (30 steps, $(grep -o 'test top-1 [0-9.]*%' "$TMP/hydra_train.out" | tail -1))"
else
  fail "hydra_training rc=$RC" "$(tail -n 5 "$TMP/hydra_train.out" "$TMP/hydra_train.err")"
fi

# 3. Resume: 15 steps, then --resume auto to 30, equals the uninterrupted 30.
run hydra_first 300 "${HYDRA[@]}" -n 2 "$MB" "${COMMON[@]}" --max-steps 15 --checkpoint-dir "$TMP/r" --log-dir "$TMP/r.l"
run hydra_resume 300 "${HYDRA[@]}" -n 2 "$MB" "${COMMON[@]}" --max-steps 30 --resume auto --checkpoint-dir "$TMP/r" --log-dir "$TMP/r.l"
if [[ $RC -eq 0 && -f $TMP/r/ckpt-00000030.h5 ]] && grep -q "resume: step 15" "$OUT" && same_state "$TMP/r/ckpt-00000030.h5" "$m"; then
  pass "hydra_resume_is_bitwise_identical (15 + 15 steps against 30)"
else
  fail "hydra_resume rc=$RC" "$(show)"
fi

# 4. Refusals: one error line, exit 2 from mpiexec, no flight dump, three kinds in turn.
n=${MPICH_REFUSALS:-15} clean=0 first_bad=""
for ((i = 0; i < n; i++)); do
  case $((i % 3)) in 0) f=(--amp fp16) ;; 1) f=(--data "$TMP/no-such-data") ;; 2) f=(--resume "$TMP/no-such.h5") ;; esac
  run "refused$i" 60 mpiexec.mpich -n 2 "$MB" "${COMMON[@]}" --max-steps 1 --checkpoint-dir "$TMP/x$i" --log-dir "$TMP/x$i.l" "${f[@]}"
  if [[ $RC -eq 2 ]] && [[ $(grep -c "^mnist_ddp: error: " "$ERR") == 1 ]] && ! grep -q "flight recorder\|received)" "$ERR" &&
     [[ -z "$(ls "$TMP/x$i.l"/flight-rank* 2>/dev/null)" ]]; then
    clean=$((clean + 1))
  elif [[ -z "$first_bad" ]]; then
    first_bad="launch $i (${f[*]}): rc=$RC $(tr '\n' ' ' <"$ERR" | cut -c1-300)"
  fi
done
((clean == n)) && pass "hydra_refusals_leave_cleanly ($n launches, three kinds, 0 dumps)" ||
  fail "hydra_refusals: $clean of $n clean" "$first_bad"

# 5. The wrong launcher for the build, both ways: each process is a world of 1 of its own MPI.
run mpich_under_mpirun 60 mpirun -np 2 "$MB" "${COMMON[@]}" --max-steps 1 --checkpoint-dir "$TMP/w1" --log-dir "$TMP/w1.l"
a_ok=$([[ $RC -ne 0 ]] && grep -q "launcher mismatch: OMPI_COMM_WORLD_RANK/SIZE = 1/2 but MPI says rank 0 of 1" "$ERR" &&
  grep -q "different MPI (MPICH" "$ERR" && grep -q "srun --mpi=pmi2" "$ERR" && echo yes)
run ompi_under_hydra 60 mpiexec.mpich -n 2 "$OB" "${COMMON[@]}" --max-steps 1 --checkpoint-dir "$TMP/w2" --log-dir "$TMP/w2.l"
if [[ $a_ok == yes && $RC -ne 0 ]] && grep -q "launcher mismatch: PMI_RANK/PMI_SIZE = 1/2 but MPI says rank 0 of 1" "$ERR" &&
   grep -q "different MPI (Open MPI" "$ERR"; then
  pass "wrong_launcher_for_the_build_is_named_both_ways"
else
  fail "wrong_launcher mpich_under_mpirun=$a_ok rc=$RC" "$(show)"
fi

# 6. srun --mpi=pmi2 with MPICH on the local two-node Slurm (root only: it starts the daemons).
if [[ $(id -u) -ne 0 ]] || ! command -v slurmctld >/dev/null; then
  echo "skip - srun --mpi=pmi2 (needs root and Slurm: tools/install-deps.sh --tests as root)"
  finish
fi
source "$REPO/tests/slurm/cluster.sh"
CL="$(mktemp -d /tmp/mnist_ddp_slurm.XXXXXX)" && chmod 755 "$CL"
trap 'cluster_stop; rm -rf "$TMP" "$CL"' EXIT
if ! cluster_start "$CL"; then
  fail "cluster_start" "$(tail -n 5 "$CL"/log/*.log 2>&1)"
  finish
fi
cd "$REPO" || exit 1
run srun_pmi2 300 salloc -N2 -n4 srun --mpi=pmi2 "$MB" "${COMMON[@]}" --max-steps 10 --print-env
env_ok=$([[ $RC -eq 0 ]] && [[ $(grep -c "launcher: srun (SLURM_PROCID=[0-3] agrees)" "$OUT") == 4 ]] && echo yes)
run srun_pmi2_train 300 salloc -N2 -n4 srun --mpi=pmi2 "$MB" "${COMMON[@]}" --max-steps 10 --checkpoint-dir "$TMP/s" --log-dir "$TMP/s.l"
if [[ $env_ok == yes && $RC -eq 0 ]] && grep -q "4 rank(s) on 2 node(s)" "$OUT" && grep -q "^done: 10 steps" "$OUT"; then
  pass "srun_pmi2_mpich_4_ranks_on_2_nodes"
else
  fail "srun_pmi2 env=$env_ok rc=$RC" "$(show)"
fi
finish
