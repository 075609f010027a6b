#!/bin/bash
# train_2x4.sh — 2 nodes x 4 tasks, one rank per task, launched by srun with PMIx.
#SBATCH --job-name=mnist_ddp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=1
#SBATCH --time=00:30:00
#SBATCH --output=mnist_ddp-%j.out
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
# One rank per core: keep BLAS single-threaded.
export OPENBLAS_NUM_THREADS=1
# Continue from the newest checkpoint when the job is requeued or resubmitted.
srun --mpi=pmix ./mnist_ddp --threads 1 --resume auto --checkpoint-dir checkpoints \
  --log-dir logging "$@"
