// requeue.hpp — preemption under Slurm: which stop asks Slurm to requeue the job, and, after the
// checkpoint such a stop led to, putting the job back in the queue (`scontrol requeue
// $SLURM_JOB_ID`) so it restarts and resumes from that checkpoint (--resume auto). The rolling
// preemption checkpoint is the store's (checkpoint/store.hpp).
#pragma once

#include <string>

namespace mnist_ddp {

// What a stop by a signal does, decided in this one place (the trainer asks once, at the agreed
// stop; its result carries the answer to the report):
// - requeue: with --requeue, on the requeue signal only (Slurm's `--signal=USR1@120` before the
//   time limit, or `scancel --signal=USR1`), as Lightning's SLURM integration does. Never on
//   SIGTERM: `scancel` marks the job CANCELLED before its steps get SIGTERM, and a requeue then
//   would turn the user's cancel into a restart; a preemption under PreemptMode=REQUEUE is
//   requeued by Slurm itself; the time limit is the requeue signal's to see.
// - preemption: the requeue signal or SIGTERM (scancel, preemption, the time limit) mean "this
//   job is about to go": its checkpoint is the job's rolling preemption checkpoint (SIGTERM still
//   checkpoints: the job may come back and resume from it). SIGINT writes an ordinary one.
struct StopDecision {
  int signal = 0;  // 0: not stopped
  bool requeue = false;
  bool preemption = false;
};
StopDecision decide_stop(int stop_signal, bool requeue, int requeue_signal);

// Runs `scontrol requeue $SLURM_JOB_ID` (rank 0 only). Returns whether Slurm accepted it; `what`
// says what happened (or why nothing was done: not under Slurm, scontrol missing, refused).
bool request_slurm_requeue(std::string* what);

}  // namespace mnist_ddp
