# common.sh — sourced by the batch scripts in slurm/ (from the checkout they were submitted from):
# loads the mnist_ddp module and launches one rank per task. Environment overrides:
# MNIST_DDP_MODULES (modulefile directory), MNIST_DDP_RUNS (where each job's folder goes, default
# runs/), MNIST_DDP_CKPT (checkpoints), MNIST_DDP_LOGS (logs), MNIST_DDP_LMOD_INIT (Lmod's init
# script, for batch shells without `module`), MNIST_DDP_MAX_RESTARTS. The names without the
# MNIST_DDP_ prefix (LMOD_INIT, MAX_RESTARTS, SWEEP_LRS) are still read, with a one-line notice.

# mnist_ddp_renamed OLD NEW: a value set under the old name is taken for NEW (unless NEW is set),
# said once on stderr.
mnist_ddp_renamed() {
  if [[ -n "${!1:-}" && -z "${!2:-}" ]]; then
    echo "mnist_ddp: notice: $1 is now called $2; using $1=${!1} (rename it in your job)" >&2
    export "$2=${!1}"
  fi
}
mnist_ddp_renamed LMOD_INIT MNIST_DDP_LMOD_INIT
mnist_ddp_renamed MAX_RESTARTS MNIST_DDP_MAX_RESTARTS

# Batch shells are not login shells: load Lmod's `module` if the site's profile did not.
if ! type module >/dev/null 2>&1; then
  # shellcheck source=/dev/null
  source "${MNIST_DDP_LMOD_INIT:-/usr/share/lmod/lmod/init/bash}"
fi
module use "${MNIST_DDP_MODULES:-$PWD/modules}"
module load mnist_ddp

# mnist_ddp_run_dir: this job's own folder, $MNIST_DDP_RUNS/<job name>-<job id>, or
# <job name>-<array job id>_<task id> for a task of an array. Two submissions of one script and the
# tasks of an array never share one (each has its own checkpoints and logs, and the directory lock
# would refuse a shared one); a requeued job keeps its job id, and a MNIST_DDP_MAX_RESTARTS relaunch runs
# inside the same job, so both find their own checkpoints again.
mnist_ddp_run_dir() {
  local id="${SLURM_JOB_ID:-local}"
  if [[ -n "${SLURM_ARRAY_JOB_ID:-}" && -n "${SLURM_ARRAY_TASK_ID:-}" ]]; then
    id="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
  fi
  echo "${MNIST_DDP_RUNS:-runs}/${SLURM_JOB_NAME:-mnist_ddp}-$id"
}

# run_mnist_ddp FLAGS...: one rank per task; --kill-on-bad-exit ends every task as soon as one
# fails; resume from the newest checkpoint; on the requeue signal (USR1, sent 120 s before the
# time limit by --signal), checkpoint at the next step and requeue the job; on SIGTERM (scancel)
# checkpoint and stop: the job ends CANCELLED.
# Like torchrun --max-restarts: a run that failed for a reason other than its input (a rank that
# crashed, was killed or aborted: exit 1; a collective watchdog abort: exit 4; a task killed by a
# signal) is launched again in the same allocation from the newest good checkpoint, up to
# MNIST_DDP_MAX_RESTARTS times (default 2), each restart logged with its cause. Never retried: success,
# bad input (2), replicas that differ (3), a diverged model (5) and deliberate stops (130, 138, 143).
run_mnist_ddp() {
  local max="${MNIST_DDP_MAX_RESTARTS:-2}" restarts=0 rc cause run_dir threads
  run_dir="$(mnist_ddp_run_dir)"
  if [[ ! "$max" =~ ^[0-9]+$ ]]; then
    echo "mnist_ddp: error: MNIST_DDP_MAX_RESTARTS=$max: give the number of restarts allowed (0 turns them off)" >&2
    return 2
  fi
  # Compute threads per rank: an explicit OMP_NUM_THREADS, else the job's --cpus-per-task (-c),
  # else 1; a --threads among the flags still wins (the last value of a flag counts).
  threads="${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}"
  if [[ ! "$threads" =~ ^[1-9][0-9]*$ ]]; then
    echo "mnist_ddp: error: threads per rank '$threads' (OMP_NUM_THREADS or --cpus-per-task): give a positive whole number" >&2
    return 2
  fi
  while :; do
    rc=0
    srun --mpi=pmix --kill-on-bad-exit=1 mnist_ddp --threads "$threads" --resume auto --requeue \
      --checkpoint-dir "${MNIST_DDP_CKPT:-$run_dir/checkpoints}" \
      --log-dir "${MNIST_DDP_LOGS:-$run_dir/logs}" "$@" || rc=$?
    case "$rc" in
      1) cause="a rank failed (crash, internal error or MPI abort)" ;;
      4) cause="a collective exceeded --collective-timeout (watchdog abort)" ;;
      130 | 138 | 143) return "$rc" ;;
      *) if ((rc > 128)); then cause="a task was killed by signal $((rc - 128))"; else return "$rc"; fi ;;
    esac
    if ((restarts >= max)); then
      echo "mnist_ddp: not restarting: $cause (exit $rc) after $restarts restart(s) (MNIST_DDP_MAX_RESTARTS=$max)" >&2
      return "$rc"
    fi
    restarts=$((restarts + 1))
    echo "mnist_ddp: restart $restarts/$max in job ${SLURM_JOB_ID:-?}: $cause (exit $rc); relaunching from the newest good checkpoint" >&2
  done
}
