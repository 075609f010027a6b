#!/bin/bash
# sweep_lr.sh — a learning-rate sweep as a job array: one task per value, each its own 2-rank
# CPU run in its own folder (runs/mnist_ddp_sweep-<array job id>_<task id>/), all side by side.
# `sbatch slurm/sweep_lr.sh [mnist_ddp flags]`; MNIST_DDP_SWEEP_LRS="0.1 0.03 0.01" (the default) picks the
# values, one per task of --array (resize both together: `sbatch --array=0-4 ...`). Then one
# table over the sweep: `tools/compare_runs runs/mnist_ddp_sweep-<array job id>_*`. Requeue,
# preemption and MNIST_DDP_MAX_RESTARTS work per task as in train_cpu_2x4.sh.
#SBATCH --job-name=mnist_ddp_sweep
#SBATCH --array=0-2
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=1
#SBATCH --time=00:30:00
#SBATCH --requeue
#SBATCH --signal=USR1@120
#SBATCH --output=%x-%A_%a.out
#SBATCH --open-mode=append
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
# shellcheck source=common.sh
source "$PWD/slurm/common.sh"

mnist_ddp_renamed SWEEP_LRS MNIST_DDP_SWEEP_LRS
read -r -a lrs <<<"${MNIST_DDP_SWEEP_LRS:-0.1 0.03 0.01}"
task="${SLURM_ARRAY_TASK_ID:-0}"
if ((task >= ${#lrs[@]})); then
  echo "sweep_lr.sh: array task $task has no learning rate (MNIST_DDP_SWEEP_LRS has ${#lrs[@]}: ${lrs[*]}); submit with --array=0-$((${#lrs[@]} - 1))" >&2
  exit 2
fi
echo "sweep_lr.sh: task $task of array job ${SLURM_ARRAY_JOB_ID:-?}: --lr ${lrs[$task]} in $(mnist_ddp_run_dir)"
run_mnist_ddp --device cpu --lr "${lrs[$task]}" "$@"
