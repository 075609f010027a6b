#!/usr/bin/env bash
# launcher_test.sh — identity derivation: --help, --print-env under mpirun, a world of one without
# a launcher, and the srun-without-PMI mismatch (simulated with Slurm's variables).
source "$(dirname "$0")/lib.sh"

run help 30 "$BIN" --help
if [[ $RC -eq 0 ]] && grep -q -- "--batch-size" "$OUT" && grep -q -- "--check-replicas" "$OUT"; then pass "help"; else fail "help rc=$RC" "$(show)"; fi

run print_env 60 mpirun -np 2 "$BIN" --device cpu --print-env
if [[ $RC -eq 0 ]] && grep -q "\[rank 0\] launcher: mpirun" "$OUT" && grep -q "\[rank 1\] launcher: mpirun" "$OUT" &&
   grep -q "\[rank 1\] local_rank: OMPI_COMM_WORLD_LOCAL_RANK = 1" "$OUT"; then
  pass "print_env_mpirun"
else
  fail "print_env_mpirun rc=$RC" "$(show)"
fi

run print_env_single 60 "$BIN" --device cpu --print-env
if [[ $RC -eq 0 ]] && grep -q "launcher: none (singleton MPI, world size 1)" "$OUT"; then pass "print_env_singleton"; else fail "print_env_singleton rc=$RC" "$(show)"; fi

# srun without an MPI bootstrap: each task is MPI rank 0 of 1 but Slurm says task k of 2.
run srun_no_pmi_task1 60 env SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_LOCALID=1 "$BIN" --device cpu --print-env
if [[ $RC -eq 2 ]] && [[ ! -s "$ERR" || $(grep -c "mnist_ddp: error" "$ERR") == 0 ]]; then
  pass "srun_without_pmi_task1_exits_quietly"
else
  fail "srun_without_pmi_task1_exits_quietly rc=$RC" "$(show)"
fi
run srun_no_pmi_task0 60 env SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 "$BIN" --device cpu --print-env
if [[ $RC -eq 2 ]] && grep -q -- "--mpi=pmix" "$ERR" && [[ $(grep -c "mnist_ddp: error" "$ERR") == 1 ]]; then
  pass "srun_without_pmi_task0_explains ($(grep -o 'srun started the tasks without an MPI bootstrap' "$ERR"))"
else
  fail "srun_without_pmi_task0_explains rc=$RC" "$(show)"
fi
finish
