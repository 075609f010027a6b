// requeue.hpp — preemption under Slurm: after the checkpoint a requeue signal (or SIGTERM) led
// to, put the job back in the queue (`scontrol requeue $SLURM_JOB_ID`) so it restarts and resumes
// from that checkpoint (--resume auto). The rolling preemption checkpoint is the store's
// (checkpoint/store.hpp).
#pragma once

#include <string>

namespace mnist_ddp {

// Runs `scontrol requeue $SLURM_JOB_ID` (rank 0 only). Returns whether Slurm accepted it; `what`
// says what happened (or why nothing was done: not under Slurm, scontrol missing, refused).
bool request_slurm_requeue(std::string* what);

}  // namespace mnist_ddp
