# common.sh — sourced by the batch scripts in slurm/ (from the checkout they were submitted from):
# loads the mnist_ddp module and launches one rank per task. Environment overrides:
# MNIST_DDP_MODULES (modulefile directory), MNIST_DDP_CKPT (checkpoints), MNIST_DDP_LOGS (logs),
# LMOD_INIT (Lmod's init script, for batch shells without `module`).

# Batch shells are not login shells: load Lmod's `module` if the site's profile did not.
if ! type module >/dev/null 2>&1; then
  # shellcheck source=/dev/null
  source "${LMOD_INIT:-/usr/share/lmod/lmod/init/bash}"
fi
module use "${MNIST_DDP_MODULES:-$PWD/modules}"
module load mnist_ddp

# run_mnist_ddp FLAGS...: one rank per task; --kill-on-bad-exit ends every task as soon as one
# fails; resume from the newest checkpoint; on the requeue signal (USR1, sent 120 s before the
# time limit by --signal) or SIGTERM, checkpoint at the next step and requeue the job.
# Like torchrun --max-restarts: a run that failed for a reason other than its input (a rank that
# crashed, was killed or aborted: exit 1; a collective watchdog abort: exit 4; a task killed by a
# signal) is launched again in the same allocation from the newest good checkpoint, up to
# MAX_RESTARTS times (default 2), each restart logged with its cause. Never retried: success,
# bad input (2), replicas that differ (3), a diverged model (5) and deliberate stops (130, 138, 143).
run_mnist_ddp() {
  local max="${MAX_RESTARTS:-2}" restarts=0 rc cause
  if [[ ! "$max" =~ ^[0-9]+$ ]]; then
    echo "mnist_ddp: error: MAX_RESTARTS=$max: give the number of restarts allowed (0 turns them off)" >&2
    return 2
  fi
  while :; do
    rc=0
    srun --mpi=pmix --kill-on-bad-exit=1 mnist_ddp --threads 1 --resume auto --requeue \
      --checkpoint-dir "${MNIST_DDP_CKPT:-checkpoints}" \
      --log-dir "${MNIST_DDP_LOGS:-logging/${SLURM_JOB_ID:-local}}" "$@" || rc=$?
    case "$rc" in
      1) cause="a rank failed (crash, internal error or MPI abort)" ;;
      4) cause="a collective exceeded --collective-timeout (watchdog abort)" ;;
      130 | 138 | 143) return "$rc" ;;
      *) if ((rc > 128)); then cause="a task was killed by signal $((rc - 128))"; else return "$rc"; fi ;;
    esac
    if ((restarts >= max)); then
      echo "mnist_ddp: not restarting: $cause (exit $rc) after $restarts restart(s) (MAX_RESTARTS=$max)"
      return "$rc"
    fi
    restarts=$((restarts + 1))
    echo "mnist_ddp: restart $restarts/$max in job ${SLURM_JOB_ID:-?}: $cause (exit $rc); relaunching from the newest good checkpoint"
  done
}
