#!/bin/bash
# train_cpu_2x4.sh — the CPU-partition variant of train_2x4.sh: 2 nodes x 4 tasks, one rank per
# core, no GPUs requested, --device cpu. `sbatch -p <cpu partition> slurm/train_cpu_2x4.sh
# [mnist_ddp flags]`; the same environment overrides and preemption handling as train_2x4.sh.
#SBATCH --job-name=mnist_ddp_cpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=1
#SBATCH --time=00:30:00
#SBATCH --requeue
#SBATCH --signal=USR1@120
#SBATCH --output=%x-%j.out
#SBATCH --open-mode=append
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
# shellcheck source=common.sh
source "$PWD/slurm/common.sh"

run_mnist_ddp --device cpu "$@"
