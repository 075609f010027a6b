#!/bin/bash
# train_2x4.sh — mnist_ddp on 2 nodes x 4 tasks, one rank per GPU (each rank takes its node's
# GPU of its local rank), launched by srun with PMIx. The GPUs are requested per node, not per task:
# per-task GPU isolation hides a node's other GPUs from each rank, which breaks CUDA peer-to-peer
# and NCCL's shared-memory paths between the ranks of a node. Submit from the checkout: `sbatch slurm/train_2x4.sh [mnist_ddp flags]`; sbatch flags
# override every #SBATCH line (-p PARTITION, -A ACCOUNT, -N, --time, ...). Nothing site-specific
# is baked in: the modulefile comes from $MNIST_DDP_MODULES (default: <checkout>/modules); the
# checkpoints and logs go to this job's own folder, runs/<job name>-<jobid>/{checkpoints,logs}
# ($MNIST_DDP_RUNS, $MNIST_DDP_CKPT, $MNIST_DDP_LOGS override); the console output to
# <job name>-<jobid>.out, appended to by each run of a requeued job. Threads per rank follow
# --cpus-per-task (-c).
# Preemption: the job is requeueable and gets SIGUSR1 120 s before its time limit; mnist_ddp
# checkpoints at the next step boundary and the requeued job resumes from it (--resume auto).
#SBATCH --job-name=mnist_ddp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
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

# NCCL knobs from the seed scripts, off by default; uncomment what your fabric needs:
# export NCCL_DEBUG=INFO                  # one line per communicator/channel: start here when stuck
# export NCCL_NSOCKS_PERTHREAD=4          # sockets per helper thread (TCP fabrics)
# export NCCL_SOCKET_NTHREADS=2           # helper threads per connection (TCP fabrics)
# export NCCL_MIN_NCHANNELS=32            # more channels: more bandwidth on big messages
# export NCCL_SOCKET_IFNAME=ib0           # the interface NCCL bootstraps and talks over (site's)

run_mnist_ddp "$@"
