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
run_mnist_ddp() {
  srun --mpi=pmix --kill-on-bad-exit=1 mnist_ddp --threads 1 --resume auto --requeue \
    --checkpoint-dir "${MNIST_DDP_CKPT:-checkpoints}" \
    --log-dir "${MNIST_DDP_LOGS:-logging/${SLURM_JOB_ID:-local}}" "$@"
}
