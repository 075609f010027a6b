// requeue.hpp — preemption under Slurm: after the checkpoint a requeue signal (or SIGTERM) led
// to, put the job back in the queue (`scontrol requeue $SLURM_JOB_ID`) so it restarts and resumes
// from that checkpoint (--resume auto); and keep one rolling preemption checkpoint per job.
#pragma once

#include <string>

namespace mnist_ddp {

// Runs `scontrol requeue $SLURM_JOB_ID` (rank 0 only). Returns whether Slurm accepted it; `what`
// says what happened (or why nothing was done: not under Slurm, scontrol missing, refused).
bool request_slurm_requeue(std::string* what);

// Records `path` as this job's preemption checkpoint (in dir/.preempt-<SLURM_JOB_ID or "local">)
// and deletes the one recorded before it when that is an older checkpoint of dir (never anything
// else). Returns the deleted path (empty if none).
std::string roll_preemption_checkpoint(const std::string& dir, const std::string& path);

}  // namespace mnist_ddp
