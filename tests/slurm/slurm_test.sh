#!/usr/bin/env bash
# slurm_test.sh — the Slurm workflows against a real Slurm started here (cluster.sh: munged,
# slurmctld, two slurmd "node1"/"node2" of 4 CPUs): `sbatch slurm/train_2x4.sh` (8 ranks on 2
# nodes, expected accuracy), the CPU-partition script, mpirun inside an allocation, an
# `salloc` + `srun` session, srun without PMI caught by mnist_ddp's launcher check, preemption,
# failures and restarts, and many jobs side by side (a job array, one script submitted twice). Needs root
# (the daemons); every daemon started is stopped by its PID at exit. `make test-slurm`; part of
# `make test` when run as root.
source "$(dirname "$0")/../e2e/lib.sh"
source "$REPO/tests/slurm/cluster.sh"
DATA="$REPO/data/dataset"
if [[ $(id -u) -ne 0 ]]; then
  echo "skip - slurm tests (they start munged, slurmctld and slurmd: run as root)"
  finish
fi
for c in munged slurmctld slurmd sbatch salloc srun unshare runuser; do
  if ! command -v "$c" >/dev/null; then
    echo "skip - slurm tests ($c missing: tools/install-deps.sh installs Slurm when run as root)"
    finish
  fi
done
# The cluster's own scratch directory: traversable by the munge user (mktemp -d is 0700).
CL="$(mktemp -d /tmp/mnist_ddp_slurm.XXXXXX)" && chmod 755 "$CL"
trap 'cluster_stop; rm -rf "$TMP" "$CL"' EXIT
t0=$(date +%s.%N)
if ! cluster_start "$CL"; then
  fail "cluster_start" "$(tail -n 5 "$CL"/log/*.log "$CL"/munge/munged.log 2>&1)"
  finish
fi
pass "local_cluster_up (munged, slurmctld, slurmd node1+node2 idle in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s)"
cd "$REPO" || exit 1
bar=80
grep -q "^mnist (" "$DATA/DATASET" && bar=95
# Every run but the first (which holds an accuracy bar) checks steps, signals, files, exit
# states and placement: those train on the 6,000 / 1,000-image subset (small_data), 37 steps an
# epoch for 8 ranks x 20. Loading the full set cost each 8-rank launch ~4 s on 2 cores.
SMALL="$(small_data)"

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
on_nodes() {  # ranks per host from rank 0's placement table: "node1:4 node2:4"
  grep -E "^# +[0-9]+ +[0-9]+ +[^ ]+ +[0-9]+ " "$OUT" | awk '{print $4}' | sort | uniq -c |
    awk '{printf "%s%s:%s", sep, $2, $1; sep=" "}'
}

# 1. The GPU batch script as users submit it (GPUs are GRES here; the tasks find none: CPU).
export MNIST_DDP_CKPT="$TMP/ckpt1" MNIST_DDP_LOGS="$TMP/log1"
submit sbatch_2x4 slurm/train_2x4.sh --data "$DATA" --epochs 1 --progress off
acc=$(top1)
if [[ "$STATE" == COMPLETED ]] && grep -q "8 rank(s) on 2 node(s)" "$OUT" &&
   [[ "$(on_nodes)" == "node1:4 node2:4" ]] && [[ -n "$acc" ]] && awk -v a="$acc" -v b="$bar" 'BEGIN { exit !(a >= b) }'; then
  pass "sbatch_train_2x4_8_ranks_on_2_nodes (top-1 ${acc}%, $(on_nodes), module loaded, srun --mpi=pmix)"
else
  fail "sbatch_train_2x4 state=$STATE top1=$acc nodes=$(on_nodes)" "$(tail -n 15 "$OUT" "$TMP/sbatch_2x4.err" 2>&1)"
fi

# 2. The CPU-partition variant.
export MNIST_DDP_CKPT="$TMP/ckpt2" MNIST_DDP_LOGS="$TMP/log2"
submit sbatch_cpu slurm/train_cpu_2x4.sh --data "$SMALL" --epochs 2 --max-steps 10 --progress off
if [[ "$STATE" == COMPLETED ]] && grep -q "8 rank(s) on 2 node(s), device cpu" "$OUT" &&
   grep -q "^done: 10 steps" "$OUT"; then
  pass "sbatch_train_cpu_2x4"
else
  fail "sbatch_train_cpu_2x4 state=$STATE" "$(tail -n 15 "$OUT" 2>&1)"
fi
unset MNIST_DDP_CKPT MNIST_DDP_LOGS

# 3. mpirun inside an allocation (Open MPI reads the allocation and starts its daemons by srun).
submit mpirun_in_alloc -N2 --ntasks-per-node=4 --wrap "mpirun ./mnist_ddp --data $SMALL --epochs 2 --max-steps 10 --progress off --log-dir $TMP/log3 --checkpoint-dir $TMP/ckpt3"
if [[ "$STATE" == COMPLETED ]] && grep -q "8 rank(s) on 2 node(s)" "$OUT" &&
   [[ "$(on_nodes)" == "node1:4 node2:4" ]] && grep -q "^done: 10 steps" "$OUT"; then
  pass "mpirun_inside_an_allocation ($(on_nodes))"
else
  fail "mpirun_inside_an_allocation state=$STATE nodes=$(on_nodes)" "$(tail -n 15 "$OUT" 2>&1)"
fi

# 3b. A job checked before it spends its allocation: the batch script with --dry-run runs every
# check on all 8 tasks of both nodes (srun, PMIx, data, the directories), prints the plan and
# writes nothing but the log: no checkpoint directory, no lock, no metrics.jsonl.
export MNIST_DDP_CKPT="$TMP/ckpt-dry" MNIST_DDP_LOGS="$TMP/log-dry"
submit sbatch_dry_run slurm/train_cpu_2x4.sh --data "$SMALL" --epochs 2 --checkpoint-every 5 --dry-run --progress off
unset MNIST_DDP_CKPT MNIST_DDP_LOGS
if [[ "$STATE" == COMPLETED ]] && grep -q "8 rank(s) on 2 node(s), device cpu" "$OUT" &&
   [[ "$(on_nodes)" == "node1:4 node2:4" ]] && grep -qE "^plan: [0-9]+ step\(s\), 1 to [0-9]+ \(2 epoch\(s\)" "$OUT" &&
   grep -q "globally on 8 rank(s) (2 node(s), device cpu)" "$OUT" &&
   grep -q "^dry run: every check before the first step passed" "$OUT" && ! grep -q "^done:" "$OUT" &&
   [[ ! -e "$TMP/ckpt-dry" && -f "$TMP/log-dry/mnist_train.log" && ! -e "$TMP/log-dry/metrics.jsonl" ]]; then
  pass "sbatch_dry_run_checks_all_8_tasks_and_writes_nothing_but_the_log ($(grep -c '^plan:' "$OUT") plan lines)"
else
  fail "sbatch_dry_run state=$STATE nodes=$(on_nodes)" "$(tail -n 15 "$OUT" 2>&1)" "$(ls -la "$TMP/ckpt-dry" "$TMP/log-dry" 2>&1)"
fi

# 4. An interactive-style session: salloc, then srun steps in it.
run salloc_srun 180 salloc -N2 -n4 bash -c "srun --mpi=pmix ./mnist_ddp --print-env && srun --mpi=pmix ./mnist_ddp --data $SMALL --epochs 1 --max-steps 5 --progress off --log-dir $TMP/log4 --checkpoint-dir $TMP/ckpt4"
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

# 5b. A configuration every task refuses is one clean exit under srun too (tests/e2e/refusal_test.sh
#     under mpirun): srun --kill-on-bad-exit ends the other tasks the moment the first exits 2, and
#     none of them may dump its flight recorder or say "SIGTERM received". SLURM_REFUSALS (50 by
#     default) steps in one allocation, 4 tasks on 2 nodes, the three kinds in turn (each after the
#     flight recorder is armed).
n_ref="${SLURM_REFUSALS:-50}"
cat >"$TMP/refusals.sh" <<EOS
for ((i = 0; i < $n_ref; i++)); do
  case \$((i % 3)) in 0) f="--resume $TMP/no-such.h5" ;; 1) f="--amp fp16" ;; 2) f="--data $TMP/no-such-data" ;; esac
  srun --mpi=pmix --kill-on-bad-exit=1 ./mnist_ddp --device cpu --data "$SMALL" --max-steps 1 \
    --progress off --log-dir "$TMP/ref\$i.l" --checkpoint-dir "$TMP/ref\$i.c" \$f \
    >"$TMP/ref\$i.out" 2>"$TMP/ref\$i.err"
  echo "\$?" >"$TMP/ref\$i.rc"
done
EOS
t0=$SECONDS
run srun_refusals 600 salloc -N2 -n4 bash "$TMP/refusals.sh"
clean=0 first_bad=""
for ((i = 0; i < n_ref; i++)); do
  e="$TMP/ref$i.err"
  if [[ "$(cat "$TMP/ref$i.rc" 2>/dev/null)" == 2 ]] && [[ $(grep -c "^mnist_ddp: error: " "$e") == 1 ]] &&
     ! grep -q "flight recorder\|received)" "$e" && [[ -z "$(ls "$TMP/ref$i.l"/flight-rank* 2>/dev/null)" ]]; then
    clean=$((clean + 1))
  elif [[ -z "$first_bad" ]]; then
    first_bad="step $i: rc=$(cat "$TMP/ref$i.rc" 2>/dev/null): $(tr '\n' ' ' <"$e" | cut -c1-400)"
  fi
done
if ((clean == n_ref)); then
  pass "srun_refusals_leave_cleanly ($n_ref srun steps of 4 tasks on 2 nodes: $clean clean, 0 dumps, $((SECONDS - t0)) s)"
else
  fail "srun_refusals_leave_cleanly: $clean of $n_ref clean" "$first_bad" "$(show)"
fi

# The workflow runs below (preemption, failures, flight dump, restarts) train at --batch-size 20:
# what they check is steps, signals, files and exit states, and a step costs a fifth.
# 6. Preemption: SIGUSR1 (what --signal=USR1@120 sends; here scancel --signal=USR1) makes the
# job checkpoint at the next step, requeue itself and resume; twice in one job, so the rolling
# preemption checkpoint is replaced; the final weights equal an uninterrupted run's.
# A 16,000-image subset: an epoch is the 100 steps (8 ranks x 20), so no epoch-end checkpoint
# joins the two counted, and a step keeps the pace the signals below are timed against.
python3 "$REPO/data/subset.py" "$DATA" "$TMP/p16k" 16000 1000 >&2
P=(--data "$TMP/p16k" --epochs 1 --max-steps 100 --batch-size 20 --log-every 5 --progress off)
export MNIST_DDP_CKPT="$TMP/pa" MNIST_DDP_LOGS="$TMP/pa-log"
submit preempt_reference slurm/train_cpu_2x4.sh "${P[@]}"
ref_state=$STATE
# signal_at STEP ID: USR1 once the job has logged STEP; once it is requeued and its previous
# run's batch script has ended, let it start again early. Slurm holds a requeued job for 120 s by
# BeginTime, and both waits below are what that hold otherwise guarantees: releasing it while the
# old batch step still runs races that step's end, and slurmd refuses a launch credential created
# in the same second as the requeue revoked the old one ("cred->ctime <= revoked", whole seconds),
# which fails the job outright. So release only in a later second than the one the job was seen
# pending in. A job that already ended stops the waiting.
signal_at() {
  local i t_pending
  for ((i = 0; i < 600; i++)); do
    grep -q "step $1/100" "$OUT" 2>/dev/null && break
    job_ended "$2" && return
    sleep 0.2
  done
  scancel --signal=USR1 "$2"
  for ((i = 0; i < 600; i++)); do
    scontrol show job "$2" | grep -q "JobState=PENDING" &&
      ! ps -eo stat=,args= | grep -v "^Z" | grep -q "slurmstepd: \[$2\." && break
    job_ended "$2" && return
    sleep 0.2
  done
  t_pending=$(date +%s)
  while (($(date +%s) <= t_pending)); do sleep 0.1; done
  scontrol update JobId="$2" StartTime=now
}
job_ended() {
  scontrol show job "$1" 2>/dev/null | grep -qE "JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL)"
}
export MNIST_DDP_CKPT="$TMP/pb" MNIST_DDP_LOGS="$TMP/pb-log"
OUT="$TMP/preempted.out"
id=$(sbatch --parsable --open-mode=append -o "$OUT" slurm/train_cpu_2x4.sh "${P[@]}")
signal_at 10 "$id"
signal_at 40 "$id"
STATE=$(job_wait "$id" 300)
unset MNIST_DDP_CKPT MNIST_DDP_LOGS
left=$(cd "$TMP/pb" && ls ckpt-*.h5 2>/dev/null | tr '\n' ' ')
if [[ "$ref_state" == COMPLETED && "$STATE" == COMPLETED ]] &&
   [[ $(grep -c "SIGUSR1 received: stopping at step" "$OUT") -eq 2 ]] &&
   [[ $(grep -c "requeue: asking Slurm to requeue job $id" "$OUT") -eq 2 ]] &&
   grep -q "preemption checkpoint replaces .*ckpt-" "$OUT" && [[ $(echo $left | wc -w) -eq 2 ]] &&
   scontrol show job "$id" | grep -q "Restarts=2" &&
   h5diff -q "$TMP/pa/ckpt-00000100.h5" "$TMP/pb/ckpt-00000100.h5" /model /model &&
   h5diff -q "$TMP/pa/ckpt-00000100.h5" "$TMP/pb/ckpt-00000100.h5" /optimizer /optimizer; then
  pass "preempted_twice_requeued_and_resumed_equals_uninterrupted (h5diff; left: $left)"
else
  fail "preemption ref=$ref_state state=$STATE left=$left" "$(grep -E 'received|requeue|resume|preempt|error' "$OUT" | head -20)" \
    "--- slurmctld on job $id:" "$(grep -E "JobId=$id\b|job $id\b" "$CL/log/slurmctld.log" | tail -15)" \
    "--- slurmd:" "$(grep -hiE "revoked|launch.*fail|job $id\b" "$CL"/log/slurmd-node*.log | tail -10)"
fi

# 7. Failures under srun end the whole job within seconds (--kill-on-bad-exit, the watchdog):
# a stuck rank (named by its peers' watchdog), a rank exiting with an error, a rank killed -9.
F=(--data "$SMALL" --epochs 6 --max-steps 200 --batch-size 20 --log-every 5 --progress off)
# These end the job; the restart test below keeps the default. Set under its old name, which the
# scripts still read with a notice (MNIST_DDP_MAX_RESTARTS since the MNIST_DDP_ prefix for all).
export MAX_RESTARTS=0
t0=$(date +%s)
export MNIST_DDP_CKPT="$TMP/f1" MNIST_DDP_LOGS="$TMP/f1-log"
submit fail_hang slurm/train_cpu_2x4.sh "${F[@]}" --debug-hang-rank 5 --collective-timeout 3
secs=$(($(date +%s) - t0))
if [[ "$STATE" == FAILED ]] && ((secs < 40)) &&
   grep -q "collective #[0-9]* (.*) has not completed after 3.[0-9] s" "$OUT" &&
   grep -q "mnist_ddp: notice: MAX_RESTARTS is now called MNIST_DDP_MAX_RESTARTS; using MAX_RESTARTS=0" "$OUT"; then
  pass "srun_stuck_rank_named_and_job_ended (${secs} s; the old name MAX_RESTARTS read with a notice)"
else
  fail "srun_stuck_rank state=$STATE secs=$secs" "$(tail -n 12 "$OUT")"
fi
# The peers' watchdogs dumped their flight recorders; the analyzer names rank 5 and its node.
verdict=$("$REPO/tools/flight_analyze" "$TMP/f1-log" 2>&1 | grep "^verdict: ")
if grep -q "^verdict: HANG on communicator 'world': .*Look at rank 5 (host node2)\." <<<"$verdict"; then
  pass "srun_stuck_rank_named_by_the_flight_analyzer (${verdict:0:110}...)"
else
  fail "srun_flight_analyze_hang" "$("$REPO/tools/flight_analyze" "$TMP/f1-log" 2>&1 | tail -n 14)"
fi
t0=$(date +%s)
export MNIST_DDP_CKPT="$TMP/f2" MNIST_DDP_LOGS="$TMP/f2-log"
submit fail_exit slurm/train_cpu_2x4.sh "${F[@]}" --debug-exit-rank 6
secs=$(($(date +%s) - t0))
if [[ "$STATE" == FAILED ]] && ((secs < 40)) && grep -q "rank 6 exits with status 1" "$OUT"; then
  pass "srun_rank_exiting_with_error_ends_the_job (${secs} s)"
else
  fail "srun_exit_rank state=$STATE secs=$secs" "$(tail -n 12 "$OUT")"
fi
export MNIST_DDP_CKPT="$TMP/f3" MNIST_DDP_LOGS="$TMP/f3-log"
OUT="$TMP/fail_kill.out"
id=$(sbatch --parsable -o "$OUT" slurm/train_cpu_2x4.sh "${F[@]}")
for ((i = 0; i < 600; i++)); do grep -q "step 10/200" "$OUT" 2>/dev/null && break; sleep 0.2; done
# A rank, never srun: the process whose command is mnist_ddp (srun's own arguments match too).
rank_pid() { ps -eo pid=,comm=,args= | awk -v m="$1" '$2 == "mnist_ddp" && index($0, m) { print $1 }' | sed -n "${2}p"; }
victim=$(rank_pid "$TMP/f3" 3)
t0=$(date +%s)
kill -9 "$victim"
STATE=$(job_wait "$id" 120)
secs=$(($(date +%s) - t0))
# Which cause srun reports is a race (see case 8): the killed task, or a peer that saw it die first.
if [[ -n "$victim" && "$STATE" == FAILED ]] && ((secs < 30)) &&
   grep -qE "not restarting: a (task was killed by signal 9|rank failed \(crash)" "$OUT"; then
  pass "srun_rank_killed_9_ends_the_job (${secs} s, MNIST_DDP_MAX_RESTARTS=0)"
else
  fail "srun_kill9 victim=$victim state=$STATE secs=$secs" "$(tail -n 12 "$OUT")"
fi
unset MAX_RESTARTS

# 7a. `scancel` cancels: SIGTERM checkpoints at the next step and stops every rank (143), and the
# job ends CANCELLED with no restart, its stop checkpoint on disk (only the requeue signal
# requeues: case 6). Under Slurm's own output name (%x-%j.out, in the submit directory).
export MNIST_DDP_CKPT="$TMP/sc" MNIST_DDP_LOGS="$TMP/sc-log"
id=$(sbatch --parsable slurm/train_cpu_2x4.sh --data "$SMALL" --epochs 6 --max-steps 200 --batch-size 20 --log-every 5 --progress off)
OUT="$REPO/mnist_ddp_cpu-$id.out"
for ((i = 0; i < 600; i++)); do grep -q "step 10/200" "$OUT" 2>/dev/null && break; sleep 0.2; done
scancel "$id"
STATE=$(job_wait "$id" 120)
# CANCELLED shows at once (scancel marks the job first); the ranks' stop takes a moment more.
for ((i = 0; i < 150; i++)); do
  ps -eo stat=,args= | grep -v "^Z" | grep -q "slurmstepd: \[$id\." || break
  sleep 0.2
done
restarts=$(scontrol show job "$id" 2>/dev/null | grep -o "Restarts=[0-9]*")
ckpt=$(grep -o "checkpoint (SIGTERM): [^ ]*" "$OUT" 2>/dev/null | head -1)
cp "$OUT" "$TMP/scancel.out" 2>/dev/null
if [[ "$STATE" == CANCELLED* && "$restarts" == Restarts=0 && -n "$ckpt" && -f "${ckpt#checkpoint (SIGTERM): }" ]] &&
   grep -q "SIGTERM received: stopping at step" "$OUT" && ! grep -q "requeue: asking Slurm" "$OUT"; then
  pass "scancel_cancels_with_a_stop_checkpoint_and_no_requeue ($STATE, $restarts, ${ckpt#checkpoint (SIGTERM): $TMP/})"
else
  fail "scancel state=$STATE $restarts ckpt='$ckpt'" "$(grep -E 'received|requeue|checkpoint|error' "$OUT" 2>&1 | head -12)"
fi
rm -f "$OUT"

# 7a'. Threads follow the allocation: -c 2 gives each rank 2 compute threads (--threads from
# SLURM_CPUS_PER_TASK), said in the start-up line.
export MNIST_DDP_CKPT="$TMP/th" MNIST_DDP_LOGS="$TMP/th-log"
submit threads_c2 -c 2 --ntasks-per-node=2 slurm/train_cpu_2x4.sh --data "$SMALL" --epochs 1 --max-steps 5 --batch-size 20 --progress off
if [[ "$STATE" == COMPLETED ]] && grep -q "4 rank(s) on 2 node(s), device cpu (.*), 2 thread(s)/rank" "$OUT"; then
  pass "cpus_per_task_2_gives_2_threads_per_rank ($(grep -o '4 rank(s) on 2 node(s).*thread(s)/rank' "$OUT" | sed 's/(oneDNN[^)]*)//'))"
else
  fail "threads_c2 state=$STATE" "$(grep -E 'rank\(s\)|error' "$OUT" | head -5)"
fi
unset MNIST_DDP_CKPT MNIST_DDP_LOGS

# 7b. A live job inspected: `scancel --signal=USR2` (the --flight-dump-signal) makes all 8 ranks
# dump their flight recorders and go on; the job completes and the analyzer finds no problem.
export MNIST_DDP_CKPT="$TMP/fd" MNIST_DDP_LOGS="$TMP/fd-log"
OUT="$TMP/flight_dump.out"
id=$(sbatch --parsable -o "$OUT" slurm/train_cpu_2x4.sh --data "$SMALL" --epochs 6 --max-steps 200 --batch-size 20 --log-every 5 --progress off)
for ((i = 0; i < 600; i++)); do grep -q "step 10/200" "$OUT" 2>/dev/null && break; sleep 0.2; done
scancel --signal=USR2 "$id"
STATE=$(job_wait "$id" 300)
dumps=$(ls "$TMP"/fd-log/flight-rank*.json 2>/dev/null | wc -l)
verdict=$("$REPO/tools/flight_analyze" "$TMP/fd-log" 2>&1 | grep "^verdict: ")
if [[ "$STATE" == COMPLETED && $dumps -eq 8 ]] && grep -q "^done: 200 steps" "$OUT" &&
   grep -q "^verdict: no problem found (8 ranks agree" <<<"$verdict"; then
  pass "scancel_signal_usr2_dumps_all_8_ranks_and_the_job_goes_on (${verdict:0:60}...)"
else
  fail "flight_dump state=$STATE dumps=$dumps" "$verdict" "$(tail -n 8 "$OUT")"
fi
unset MNIST_DDP_CKPT MNIST_DDP_LOGS

# 8. Restart after a failure (torchrun --max-restarts): a rank killed -9 mid-run; the batch script
# relaunches from the newest checkpoint in the same allocation, the job completes, and its final
# model equals an uninterrupted run's bit for bit. Bad input (exit 2) is never retried. The cause
# srun reports is a race: the killed task (signal 9), or a peer whose MPI saw it die first (exit 1,
# seen once so far); either must restart.
R=(--data "$SMALL" --epochs 4 --max-steps 120 --batch-size 20 --checkpoint-every 20 --log-every 5 --progress off)
export MNIST_DDP_CKPT="$TMP/r0" MNIST_DDP_LOGS="$TMP/r0-log"
submit restart_ref slurm/train_cpu_2x4.sh "${R[@]}"
ref_state=$STATE
export MNIST_DDP_CKPT="$TMP/r1" MNIST_DDP_LOGS="$TMP/r1-log"
OUT="$TMP/restart.out"
id=$(sbatch --parsable -o "$OUT" slurm/train_cpu_2x4.sh "${R[@]}")
for ((i = 0; i < 1200; i++)); do grep -q "step 50/120" "$OUT" 2>/dev/null && break; sleep 0.1; done
victim=$(rank_pid "$TMP/r1" 2)
kill -9 "$victim"
STATE=$(job_wait "$id" 300)
if [[ $ref_state == COMPLETED && -n "$victim" && "$STATE" == COMPLETED ]] &&
   grep -qE "mnist_ddp: restart 1/2 in job $id: a (task was killed by signal 9|rank failed \(crash)" "$OUT" &&
   grep -q "^resume: step [1-9][0-9]*, " "$OUT" && grep -q "done: 120 steps" "$OUT" &&
   h5diff -q "$TMP/r0/ckpt-00000120.h5" "$TMP/r1/ckpt-00000120.h5" /model /model &&
   h5diff -q "$TMP/r0/ckpt-00000120.h5" "$TMP/r1/ckpt-00000120.h5" /optimizer /optimizer; then
  pass "rank_killed_9_restarted_from_checkpoint_equals_uninterrupted ($(grep -o '^resume: step [0-9]*' "$OUT" | tail -1); h5diff)"
else
  fail "restart ref=$ref_state state=$STATE victim=$victim" "$(grep -E 'restart|resume|done:|error' "$OUT" | head -12)"
fi
export MNIST_DDP_CKPT="$TMP/r3" MNIST_DDP_LOGS="$TMP/r3-log"
MNIST_DDP_MAX_RESTARTS=two submit restart_bad_max slurm/train_cpu_2x4.sh "${R[@]}"
if [[ "$STATE" == FAILED ]] && grep -q "MNIST_DDP_MAX_RESTARTS=two: give the number of restarts allowed" "$OUT"; then
  pass "max_restarts_not_a_number_is_one_clear_error"
else
  fail "restart_bad_max state=$STATE" "$(tail -n 5 "$OUT")"
fi
export MNIST_DDP_CKPT="$TMP/r2" MNIST_DDP_LOGS="$TMP/r2-log"
submit restart_bad_input slurm/train_cpu_2x4.sh --data "$TMP/nowhere"
if [[ "$STATE" == FAILED ]] && ! grep -q "restart" "$OUT" && grep -q "mnist_ddp: error: " "$OUT"; then
  pass "bad_input_is_never_restarted"
else
  fail "restart_bad_input state=$STATE" "$(tail -n 8 "$OUT")"
fi
unset MNIST_DDP_CKPT MNIST_DDP_LOGS

# 9. Many jobs side by side: an array of 3 tasks (slurm/sweep_lr.sh), each its own run folder
# under $MNIST_DDP_RUNS, then one table over the sweep; and the same script submitted twice
# (no MNIST_DDP_CKPT), each job training in its own folder rather than resuming the other's.
export MNIST_DDP_RUNS="$TMP/runs"
OUT="$TMP/sweep.out"
id=$(sbatch --parsable -o "$TMP/sweep-%a.out" slurm/sweep_lr.sh --data "$SMALL" --epochs 1 --max-steps 20 --log-every 5 --progress off)
states=""
for t in 0 1 2; do states+="$(job_wait "${id}_$t" 300) "; done
dirs=$(cd "$TMP/runs" 2>/dev/null && ls -d mnist_ddp_sweep-"${id}"_* | tr '\n' ' ')
table=$("$REPO/tools/compare_runs" "$TMP"/runs/mnist_ddp_sweep-"${id}"_* --sort lr 2>&1)
why=""
[[ "$states" == "COMPLETED COMPLETED COMPLETED " ]] || why+=" states:$states"
[[ "$dirs" == "mnist_ddp_sweep-${id}_0 mnist_ddp_sweep-${id}_1 mnist_ddp_sweep-${id}_2 " ]] || why+=" dirs:$dirs"
for t in 0 1 2; do
  d="$TMP/runs/mnist_ddp_sweep-${id}_$t"
  [[ -f "$d/checkpoints/ckpt-00000020.h5" && -f "$d/logs/metrics.jsonl" ]] || why+=" task-$t-files"
  grep -q "resume: no checkpoint in $d/checkpoints, starting fresh" "$TMP/sweep-$t.out" || why+=" task-$t-not-fresh"
done
for lr in 0.01 0.03 0.1; do
  grep -qE "^mnist_ddp_sweep-${id}_[0-2] +$lr +[0-9.]+% .* 20 +finished$" <<<"$table" || why+=" no-row-lr-$lr"
done
if [[ -z $why ]]; then
  pass "job_array_of_3_tasks_each_in_its_own_folder_and_one_table ($(grep -c finished <<<"$table") finished; $(head -n 1 <<<"$table" | tr -s ' ' | cut -c1-60))"
else
  fail "job_array:$why" "$table" "$(tail -n 5 "$TMP"/sweep-*.out)"
fi
ids=()
for n in 1 2; do
  ids+=("$(sbatch --parsable -o "$TMP/twice-$n.out" slurm/train_cpu_2x4.sh --data "$SMALL" --epochs 1 --max-steps 5 --progress off)")
done
st1=$(job_wait "${ids[0]}" 300) st2=$(job_wait "${ids[1]}" 300)
if [[ "$st1 $st2" == "COMPLETED COMPLETED" ]] &&
   grep -q "^done: 5 steps" "$TMP/twice-1.out" && grep -q "^done: 5 steps" "$TMP/twice-2.out" &&
   grep -q "starting fresh" "$TMP/twice-2.out" &&
   [[ -f "$TMP/runs/mnist_ddp_cpu-${ids[0]}/checkpoints/ckpt-00000005.h5" &&
      -f "$TMP/runs/mnist_ddp_cpu-${ids[1]}/checkpoints/ckpt-00000005.h5" ]]; then
  pass "the_same_script_submitted_twice_trains_twice_in_two_folders (jobs ${ids[*]})"
else
  fail "submitted_twice $st1/$st2" "$(tail -n 4 "$TMP"/twice-*.out)" "$(ls -R "$TMP/runs" | head -20)"
fi
unset MNIST_DDP_RUNS

# 10. Which node is slow: node2 held to a quarter of one core (a CPU cgroup's CFS quota on its
# slurmd, which every task it starts inherits: a throttled node, as a real one is) while
# slurm/check_cluster.sh runs over the allocation and while a training job runs. check_cluster
# must pass the healthy allocation (exit 0) and name node2 in the slowed one (exit 1 or 2); the
# training run's end-of-run table must put node2 first, SLOW. Each of check_cluster's measurements
# must have a number: node2's score alone and together (the all-tasks run once timed nothing, 8
# steps against windows of 10, and scored every node 1.00), the all-reduce's busbw.
# (Before the cgroup, a loop stopped and continued node2's ranks with SIGSTOP/SIGCONT, finding
# them by their environment: on 2 shared cores its searches watered the stops down (node2 0.76
# once, where 0.3 was meant), ranks it had not found yet ran at full speed, and node1's alone
# rounds varied by up to 48% while it ran, which check_cluster rightly took for noise.)
SLOW_CG=""
slow_setup() {  # slow_setup NODE: NODE's slurmd into a CPU cgroup of its own, unthrottled for now
  local pid v1=/sys/fs/cgroup/cpu v2=/sys/fs/cgroup
  pid=$(<"$CL/slurmd-$1.pid")
  if [[ -f $v1/cpu.cfs_quota_us ]] && mkdir -p "$v1/mnist_ddp_$1" 2>/dev/null &&
     { echo "$pid" >"$v1/mnist_ddp_$1/cgroup.procs"; } 2>/dev/null; then
    SLOW_CG="$v1/mnist_ddp_$1"
    echo 10000 >"$SLOW_CG/cpu.cfs_period_us"
  elif [[ -f $v2/cgroup.subtree_control ]] && { echo +cpu >"$v2/cgroup.subtree_control"; } 2>/dev/null &&
       mkdir -p "$v2/mnist_ddp_$1" 2>/dev/null && { echo "$pid" >"$v2/mnist_ddp_$1/cgroup.procs"; } 2>/dev/null; then
    SLOW_CG="$v2/mnist_ddp_$1"
  fi
}
# slow_node / stop_slow: 2.5 ms of CPU time every 10 ms for all of the node's processes together
# (a shorter period than the default 100 ms, so a step of a few ms is slowed evenly).
slow_node() {
  if [[ -f $SLOW_CG/cpu.cfs_quota_us ]]; then echo 2500 >"$SLOW_CG/cpu.cfs_quota_us"; else echo "2500 10000" >"$SLOW_CG/cpu.max"; fi
}
stop_slow() {
  if [[ -f $SLOW_CG/cpu.cfs_quota_us ]]; then echo -1 >"$SLOW_CG/cpu.cfs_quota_us"; else echo "max 10000" >"$SLOW_CG/cpu.max"; fi
}
slow_teardown() {  # after cluster_stop: what is left goes back to the parent, then the cgroup goes
  [[ -n $SLOW_CG && -d $SLOW_CG ]] || return 0
  local p
  for p in $(cat "$SLOW_CG/cgroup.procs" 2>/dev/null); do echo "$p" >"$(dirname "$SLOW_CG")/cgroup.procs"; done 2>/dev/null
  rmdir "$SLOW_CG" 2>/dev/null
}
trap 'cluster_stop; slow_teardown; rm -rf "$TMP" "$CL"' EXIT
slow_setup node2
if [[ -z $SLOW_CG ]]; then
  echo "skip - which_node_is_slow (no writable CPU cgroup: neither cgroup v1's cpu controller nor v2's cpu.max)"
  finish
fi
stop_slow  # unthrottled, even where an earlier run that was killed left its cgroup throttled
exit_of() { scontrol show job "$1" | grep -o ' ExitCode=[0-9]*' | cut -d= -f2; }
# Both "nodes" share this machine's cores, and a VM's cores need not be equally fast: this one's
# core 1 trains 17% slower than core 0, and on a CI machine node1's rank, left on one core for both
# rounds alone, scored 0.75 in a healthy allocation (WARN, exit 1). On real nodes each node has
# its own cores; here both slurmds (and every task they start, which inherits the mask) share
# one core for the two check_cluster runs, so the healthy pair is equal by construction and the
# throttled node2 (a quarter of that core) is what differs. Unpinned again for the training run.
PIN_CPU=$(taskset -pc $$ | sed 's/.*: //; s/[,-].*//')
pin_nodes() {  # pin_nodes CPULIST: both slurmds' threads to CPULIST
  local n
  for n in node1 node2; do taskset -a -pc "$1" "$(<"$CL/slurmd-$n.pid")" >/dev/null || return 1; done
}
ALL_CPUS=$(taskset -pc $$ | sed 's/.*: //')
if ! pin_nodes "$PIN_CPU"; then  # both or neither: one pinned node would be the slow one
  pin_nodes "$ALL_CPUS"
  echo "(could not pin the slurmds to cpu $PIN_CPU: check_cluster's nodes may get cores of different speed)"
fi
# Both checks write to one --out folder: a rerun must not trip over the first one's checkpoints.
# A checkout without build/bench/comm_bench (only `make` ran) gets one clear error, exit 3, before
# anything runs: never a silent "not measured" (an allocation's environment, faked: it exits first).
mkdir -p "$TMP/bare"
run cc_no_bench 60 env SLURM_JOB_ID=1 SLURM_JOB_NODELIST=node1 MNIST_DDP_ROOT="$TMP/bare" slurm/check_cluster.sh --out "$TMP/cc_bare"
if [[ $RC -eq 3 ]] && grep -q "check_cluster.sh: $TMP/bare/build/bench/comm_bench is missing .*make build/bench/comm_bench" "$ERR" &&
   [[ -z "$(ls "$TMP/cc_bare" 2>/dev/null)" ]]; then
  pass "check_cluster_without_comm_bench_is_one_clear_error (exit 3)"
else
  fail "check_cluster_without_comm_bench rc=$RC" "$(show)"
fi
pause_background "check_cluster and the slowed-node training run score nodes against each other"
# Three rounds: check_cluster leaves out each node's round farthest from its median, so one
# disturbed round of node1 (49.8% apart from its other, once, with 2 rounds) does not excuse node2.
CC=(--data "$SMALL" --steps 30 --rounds 3)
OUT="$TMP/cc_ok.out"
id=$(sbatch --parsable -N2 --ntasks-per-node=4 -o "$OUT" slurm/check_cluster.sh "${CC[@]}" --out "$TMP/cc")
STATE=$(job_wait "$id" 300) ok_exit=$(exit_of "$id")
ok_table=$(cat "$OUT")
slow_node
OUT="$TMP/cc_slow.out"
id=$(sbatch --parsable -N2 --ntasks-per-node=4 -o "$OUT" slurm/check_cluster.sh "${CC[@]}" --out "$TMP/cc")
STATE=$(job_wait "$id" 300) slow_exit=$(exit_of "$id")
stop_slow
pin_nodes "$ALL_CPUS" || echo "(could not unpin the slurmds from cpu $PIN_CPU: the training run below shares it)"
if [[ "$ok_exit" == 0 ]] && grep -q "^check_cluster: OK: 2 node(s) within the thresholds" <<<"$ok_table" &&
   [[ "$slow_exit" == 1 || "$slow_exit" == 2 ]] && grep -qE "^check_cluster: (WARN|CRITICAL): node2 \(JSON" "$OUT" &&
   grep -qE "^node2 +[0-9]+ +0\.[0-9]+ +0\.[0-5][0-9]  (WARN|CRITICAL)$" "$OUT" && grep -qE "^node1 .* OK$" "$OUT" &&
   grep -qE "^all-reduce between the nodes .*: busbw [0-9.]+ GB/s" <<<"$ok_table" &&
   grep -q "^all-reduce result (every rank, bit for bit against the exact sum): exact" <<<"$ok_table" &&
   python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d['slow_nodes']==['node2'] else 1)" "$TMP/cc/check_cluster.json"; then
  pass "check_cluster_passes_a_healthy_allocation_and_names_the_slowed_node (exit $ok_exit, then $slow_exit: healthy $(grep -E '^node[12] ' <<<"$ok_table" | awk '{print $1, $3, $4}' | paste -sd ' '), $(grep -o 'noise: [^;]*' <<<"$ok_table"); $(grep -o 'busbw [0-9.]* GB/s' <<<"$ok_table"); slowed: $(grep -E '^node2 ' "$OUT" | tr -s ' '))"
else
  fail "check_cluster ok_exit=$ok_exit slow_exit=$slow_exit" "--- healthy" "$ok_table" "--- node2 slowed" "$(cat "$OUT")"
fi
# A node whose all-reduce result is wrong (comm_bench's test seam: rank 1, node2, adds 1 to one
# element of its sum) is CRITICAL and named, whatever its speed: exit 2.
OUT="$TMP/cc_wrong.out"
id=$(MNIST_DDP_TEST_CORRUPT_ALLREDUCE=1 sbatch --parsable -N2 --ntasks-per-node=4 -o "$OUT" slurm/check_cluster.sh --data "$SMALL" --steps 10 --rounds 1 --out "$TMP/ccw")
STATE=$(job_wait "$id" 300) wrong_exit=$(exit_of "$id")
if [[ "$wrong_exit" == 2 ]] && grep -qE "^node2 .*CRITICAL \(wrong all-reduce result\)$" "$OUT" &&
   grep -q "^check_cluster: CRITICAL: node2 " "$OUT" && grep -q "^all-reduce result (every rank, bit for bit against the exact sum): WRONG on node2 (" "$OUT" &&
   ! grep -qE "^node1 .*wrong" "$OUT"; then
  pass "check_cluster_names_the_node_with_a_wrong_all_reduce_result (exit 2: $(grep -o 'WRONG on node2 ([^,]*' "$OUT"))"
else
  fail "check_cluster_wrong_result exit=$wrong_exit" "$(cat "$OUT")"
fi
export MNIST_DDP_CKPT="$TMP/st" MNIST_DDP_LOGS="$TMP/st-log"
OUT="$TMP/straggler_job.out"
id=$(sbatch --parsable -o "$OUT" slurm/train_cpu_2x4.sh --data "$SMALL" --epochs 5 --max-steps 40 --straggler-every 5 --straggler-threshold 0.40 --log-every 5 --progress off)
for ((i = 0; i < 600; i++)); do grep -q "^data: " "$OUT" 2>/dev/null && break; sleep 0.1; done
# Threshold 0.40: on CI's 2 shared cores node1's own ranks scored as low as 0.52 against each
# other (rank 0 also logs; 0.52 made a local CI run fail at 0.55 on 2026-11-27); node2, held to a
# quarter of a core, scores 0.12-0.16, still 2.5x below the threshold.
slow_node
STATE=$(job_wait "$id" 300)
stop_slow
resume_background
unset MNIST_DDP_CKPT MNIST_DDP_LOGS
first=$(grep -A2 "^nodes (compute per step" "$OUT" | sed -n 3p)
if [[ "$STATE" == COMPLETED ]] && grep -qE "^  node2 +4-7 +[0-9.]+ +0\.[0-6][0-9]  SLOW$" <<<"$first" &&
   grep -qE "^straggler: rank [4-7] \(host node2, cpu\) is slow" "$OUT" &&
   ! grep -qE "^straggler: rank [0-3] .* is slow" "$OUT"; then
  pass "training_run_names_the_slowed_node_in_its_end_of_run_table ($(grep -A3 "^nodes (compute" "$OUT" | sed -n '3,4p' | tr -s ' ' | paste -sd ';'))"
else
  fail "straggler_table state=$STATE" "$(grep -A4 '^nodes' "$OUT")" "$(grep '^straggler' "$OUT" | head -5)"
fi
finish
