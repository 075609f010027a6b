#!/usr/bin/env bash
# cluster.sh — a real two-node Slurm on this one machine, for the tests (sourced). As root:
# munged, slurmctld and two slurmd ("node1", "node2": 4 CPUs and 4 GRES gpus declared each, every
# slurmd in its own UTS namespace so its tasks see their node's hostname), all under a scratch
# directory, every daemon stopped by the PID it wrote. Facts behind each setting:
# ../shared/notes/local-slurm-and-openmpi.md.
#   cluster_start DIR   -> exports SLURM_CONF; returns once both nodes are idle
#   cluster_stop        -> kills slurmd x2, slurmctld, munged (by pid file); removes nothing
#   job_wait ID SECS    -> waits for job ID to leave the queue; prints its final state

cluster_start() {
  CLUSTER_DIR="$1"
  local d="$CLUSTER_DIR"
  mkdir -p "$d"/{etc,state,log,munge} "$d"/spool/node{1,2} "$d"/tmp/node{1,2}
  chmod 755 "$d"
  chown munge:munge "$d/munge" && chmod 755 "$d/munge"
  # munged under its own scratch files, as the munge user (the key is the package's).
  runuser -u munge -- /usr/sbin/munged --socket="$d/munge/munge.socket" \
    --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" \
    --seed-file="$d/munge/munged.seed" || return 1
  cat >"$d/etc/slurm.conf" <<CONF
ClusterName=mnistddp
SlurmctldHost=localhost
SlurmctldPort=${CLUSTER_PORT:-16817}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge/munge.socket
CryptoType=crypto/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
TmpFS=$d/tmp/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
SchedulerParameters=batch_sched_delay=0
MailProg=/bin/true
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
SlurmdDebug=debug
KillWait=5
InactiveLimit=0
NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17001 CPUs=4 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=2000 Gres=gpu:4
NodeName=node2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17002 CPUs=4 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=2000 Gres=gpu:4
PartitionName=debug Nodes=node[1-2] Default=YES State=UP
CONF
  # GRES "gpus" backed by plain files (Slurm drops file-less GPUs): schedulable, so the GPU
  # script's requests are honoured, while the tasks see no GPU and train on the CPU.
  mkdir -p "$d/dev"
  for g in 0 1 2 3; do mknod "$d/dev/gpu$g" c 1 3 2>/dev/null || touch "$d/dev/gpu$g"; done
  echo "Name=gpu File=$d/dev/gpu[0-3]" >"$d/etc/gres.conf"
  export SLURM_CONF="$d/etc/slurm.conf"
  /usr/sbin/slurmctld -i || return 1
  for n in node1 node2; do
    unshare --uts sh -c "hostname $n && exec /usr/sbin/slurmd -N $n" || return 1
  done
  local i f
  for ((i = 0; i < 300; i++)); do
    if [[ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | tr '\n' ' ')" == "node1 node2 " ]]; then
      # Our own daemons must be the ones answering (another cluster on these ports would too).
      for f in slurmctld slurmd-node1 slurmd-node2; do
        if [[ ! -s "$d/$f.pid" ]] || ! pid_alive "$(<"$d/$f.pid")"; then
          echo "cluster_start: $f is not running (ports ${CLUSTER_PORT:-16817}/17001/17002 taken by another Slurm?); see $d/log" >&2
          return 1
        fi
      done
      return 0
    fi
    sleep 0.1
  done
  echo "cluster_start: nodes not idle after 30 s; see $d/log" >&2
  return 1
}

# A process that is gone or a zombie counts as stopped (this machine's init reaps late).
pid_alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) && [[ -n "$s" && "$s" != Z* ]]; }

cluster_stop() {
  local d="$CLUSTER_DIR" f pid i
  for f in "$d"/slurmd-node1.pid "$d"/slurmd-node2.pid "$d"/slurmctld.pid "$d"/munge/munged.pid; do
    [[ -s "$f" ]] || continue
    pid=$(<"$f")
    kill -TERM "$pid" 2>/dev/null || continue
    for ((i = 0; i < 100; i++)); do pid_alive "$pid" || break; sleep 0.1; done
    pid_alive "$pid" && kill -KILL "$pid" 2>/dev/null
  done
  return 0
}

job_wait() {
  local id="$1" secs="$2" i state
  for ((i = 0; i < secs * 5; i++)); do
    state=$(scontrol show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    case "$state" in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED)
        echo "$state"
        return 0
        ;;
    esac
    sleep 0.2
  done
  echo "TIMEOUT_WAITING(${state:-unknown})"
  return 1
}
