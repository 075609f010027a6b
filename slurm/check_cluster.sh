#!/bin/bash
# check_cluster.sh — which node of an allocation is slow, in about a minute, before a long job
# runs on it. Inside `salloc` (`slurm/check_cluster.sh [flags]`) or as a batch job (`sbatch -N4
# slurm/check_cluster.sh [flags]`). Three measurements, one table, one JSON file, one exit status:
#   1. each node's training throughput alone: one rank on every node at once (separate srun steps,
#      so no node waits for another), ROUNDS rounds, the median per node; the spread between a
#      node's rounds is the noise this allocation has, measured, not assumed (from 3 rounds on,
#      without the round farthest from the node's median: one disturbed round is not the noise);
#   2. the all-reduce bus bandwidth between the nodes (build/bench/comm_bench, one rank per node,
#      nccl-tests' algbw/busbw: busbw = algbw x 2(n-1)/n), 4 MiB messages, and its result checked
#      on every rank bit for bit (an integer pattern's exact sum): a node that got a wrong answer
#      is CRITICAL, named;
#   3. a short run on every task of the allocation with mnist_ddp's straggler detection: its
#      per-node table (each node's median compute per step, waits for other nodes left out).
# A node is WARN when its score (the fastest node's throughput / its own, from 1 and from 3,
# whichever is lower) is below --warn, CRITICAL below --critical; a score is only believed below
# 1 - 3 x the noise measured on the other nodes (so a noisy allocation does not blame a node for
# jitter, and a slow node's own erratic rounds do not excuse it).
# Exit 0 OK, 1 WARN, 2 CRITICAL (the last line names the nodes), 3 when the check itself failed.
#   --warn S (0.8)  --critical S (0.6)  --rounds R (3)  --steps N (40, per measurement)
#   --data DIR (data/dataset)  --device cpu|cuda (cpu)  --json FILE (check_cluster.json)
#   --out DIR (check_cluster.<job id>)  --seconds S (60: a budget each step is cut to)
# MNIST_DDP_SRUN_MPI: the srun --mpi plugin (default pmix; pmi2 for MPICH, cray_shasta for Cray).
# It needs build/bench/comm_bench beside the binary (`make build/bench/comm_bench`, or `make
# test-build`; `make install` copies it), else exit 3 before anything runs.
#SBATCH --job-name=check_cluster
#SBATCH --time=00:10:00
#SBATCH --output=%x-%j.out
set -uo pipefail
# The srun MPI plugin of this build's MPI: pmix (Open MPI), pmi2 (MPICH), cray_shasta (Cray MPICH).
SRUN_MPI="${MNIST_DDP_SRUN_MPI:-pmix}"
cd "${SLURM_SUBMIT_DIR:-.}" || exit 3
WARN=0.8 CRIT=0.6 ROUNDS=3 STEPS=40 DATA=data/dataset DEVICE=cpu JSON="" OUTD="" BUDGET=60
# The header above, up to the #SBATCH lines (not a line count, which drifts when it grows).
usage() { awk 'NR > 1 && /^#SBATCH/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
while (($#)); do
  case "$1" in
    --warn) WARN="$2"; shift 2 ;;
    --critical) CRIT="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --json) JSON="$2"; shift 2 ;;
    --out) OUTD="$2"; shift 2 ;;
    --seconds) BUDGET="$2"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "check_cluster.sh: unknown flag $1 (--help lists them)" >&2; exit 3 ;;
  esac
done
bad() { echo "check_cluster.sh: $* (--help)" >&2; exit 3; }
for f in "--warn $WARN" "--critical $CRIT"; do
  [[ "${f#* }" =~ ^(0?[.][0-9]+|1([.]0*)?)$ ]] || bad "$f: give a score between 0 and 1"
done
awk -v w="$WARN" -v c="$CRIT" 'BEGIN { exit !(c > 0 && c <= w) }' ||
  bad "--critical $CRIT must be above 0 and at most --warn $WARN"
for f in "--rounds $ROUNDS" "--steps $STEPS" "--seconds $BUDGET"; do
  [[ "${f#* }" =~ ^[1-9][0-9]*$ ]] || bad "$f: give a whole number above 0"
done
if [[ -z "${SLURM_JOB_ID:-}" ]]; then
  echo "check_cluster.sh: not inside a Slurm allocation: run it in salloc, or sbatch it" >&2
  exit 3
fi
mapfile -t NODES < <(scontrol show hostnames "${SLURM_JOB_NODELIST:-}")
((${#NODES[@]} > 0)) || { echo "check_cluster.sh: no nodes in SLURM_JOB_NODELIST" >&2; exit 3; }
OUTD="${OUTD:-check_cluster.$SLURM_JOB_ID}"
JSON="${JSON:-$OUTD/check_cluster.json}"
mkdir -p "$OUTD" || exit 3
ROOT="${MNIST_DDP_ROOT:-$PWD}"
BIN="$(command -v mnist_ddp || echo "$ROOT/mnist_ddp")"
# A checkout's build/bench/comm_bench, or an installed tree's libexec/mnist_ddp/comm_bench.
COMM_BENCH="$ROOT/build/bench/comm_bench"
[[ -x "$COMM_BENCH" ]] || COMM_BENCH="$ROOT/libexec/mnist_ddp/comm_bench"
if [[ ! -x "$COMM_BENCH" ]]; then
  echo "check_cluster.sh: $ROOT/build/bench/comm_bench is missing (it measures the all-reduce bandwidth between the nodes): build it with 'make build/bench/comm_bench' in $ROOT, then run this again" >&2
  exit 3
fi
T0=$SECONDS
left() { local l=$((BUDGET - (SECONDS - T0))); ((l < 10)) && l=10; echo "$l"; }
# --epochs STEPS: --max-steps is what ends every run (an epoch has a step at least), also the run of
# every task together, whose epochs are a world size shorter (8 steps on a 6,000-image set).
RUN=(--device "$DEVICE" --data "$DATA" --epochs "$STEPS" --max-steps "$STEPS" --progress off --threads 1)

# 1. Alone: one rank per node, every node at once, ROUNDS rounds.
echo "check_cluster: ${#NODES[@]} node(s): ${NODES[*]}; $ROUNDS round(s) alone, then bandwidth, then all together"
for ((r = 1; r <= ROUNDS; r++)); do
  for n in "${NODES[@]}"; do
    d="$OUTD/alone-$n-r$r"
    # Each measurement starts from an empty folder: a rerun in the same allocation (or --out) must
    # not meet the previous run's checkpoints, which mnist_ddp refuses to overwrite.
    rm -rf "$d"
    timeout "$(left)" srun --mpi="$SRUN_MPI" -N1 -n1 -w "$n" --exact "$BIN" "${RUN[@]}" --straggler-every 0 \
      --checkpoint-dir "$d/ckpt" --log-dir "$d" >"$d.out" 2>&1 &
  done
  wait
done
# 2. Bandwidth between the nodes (one rank each).
rm -f "$OUTD/comm_bench.json"
if ((${#NODES[@]} > 1)) && [[ -x "$COMM_BENCH" ]]; then
  # -n as well as -N: inside a batch job srun would otherwise start the job's task count.
  # Its last line checks every rank's result bit for bit against the exact sum of an integer
  # pattern and names a rank (and host) that got a wrong one; the bandwidth goes to the JSON file.
  timeout "$(left)" srun --mpi="$SRUN_MPI" -N "${#NODES[@]}" -n "${#NODES[@]}" --ntasks-per-node=1 "$COMM_BENCH" \
    --benchmark_filter='^BM_AllreduceMpi/4194304/' --benchmark_out="$OUTD/comm_bench.json" \
    --benchmark_out_format=json >"$OUTD/comm_bench.out" 2>"$OUTD/comm_bench.err"
fi
# 3. Every task of the allocation, with straggler detection (windows of 10 steps).
rm -rf "$OUTD/all"
timeout "$(left)" srun --mpi="$SRUN_MPI" --kill-on-bad-exit=1 "$BIN" "${RUN[@]}" --straggler-every 10 --log-every 10 \
  --checkpoint-dir "$OUTD/all/ckpt" --log-dir "$OUTD/all" >"$OUTD/all.out" 2>&1

python3 - "$OUTD" "$JSON" "$WARN" "$CRIT" "$ROUNDS" "${NODES[@]}" <<'PY'
import json, os, statistics, sys
outd, path, warn, crit, rounds = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
nodes = sys.argv[6:]

def done_ips(log_dir):
    try:
        recs = [json.loads(l) for l in open(os.path.join(log_dir, "metrics.jsonl"))]
        return [r for r in recs if r.get("event") == "done"][-1]["images_per_s"]
    except Exception:
        return None

alone = {n: [v for v in (done_ips(f"{outd}/alone-{n}-r{r}") for r in range(1, rounds + 1)) if v] for n in nodes}
med = {n: statistics.median(v) if v else None for n, v in alone.items()}
# A node's noise: the spread of its rounds around their median. From 3 rounds on, the round farthest
# from the median is left out: one round disturbed by something outside the node (a cold page
# cache, another job's burst on a shared VM: 49.8% once on the 2-core test cluster, where the others
# differ by 5-20%) would otherwise set a bar that hides a slow node, while the median already
# ignores it.
def spread_of(v):
    if len(v) < 2:
        return 0.0
    m = statistics.median(v)
    kept = sorted(v, key=lambda x: abs(x - m))[:-1] if len(v) >= 3 else v
    return (max(kept) - min(kept)) / m
spread = {n: spread_of(v) for n, v in alone.items()}
noise = max(spread.values(), default=0.0)
best = max((v for v in med.values() if v), default=None)
try:
    table = [json.loads(l) for l in open(f"{outd}/all/metrics.jsonl") if '"nodes"' in l][-1]["nodes"]
    together = {r["host"]: r["score"] for r in table}
except Exception:
    together = {}
try:
    b = json.load(open(f"{outd}/comm_bench.json"))["benchmarks"][0]
    bus = {"busbw_GBps": b["busbw_GBps"], "algbw_GBps": b["algbw_GBps"], "bytes": 4 << 20}
except Exception:
    bus = None
# The all-reduce's result, checked on every rank: the hosts that got a wrong sum are CRITICAL
# whatever their speed (silent corruption: NCCL's LL128 protocol on GH200, docs/gpu.md).
import re
wrong = {}
try:
    for line in open(f"{outd}/comm_bench.out"):
        m = re.search(r"all-reduce result check: WRONG on rank (\d+) \(host ([^)]*)\): (.*)", line)
        if m:
            wrong[m.group(2)] = line.split(": ", 1)[1].strip()
    result = "wrong" if wrong else ("exact" if "result check: exact" in open(f"{outd}/comm_bench.out").read() else None)
except OSError:
    result = None
result_json = {"result": result, "wrong": wrong}
# A node's score is believed below 1 only beyond 3x the noise of the other nodes: a node slowed
# in bursts (a throttling CPU, a noisy neighbour) has erratic rounds of its own, which must not
# raise the bar it is judged by. (Alone, a node has only its own.)
def believable_for(n):
    others = [spread[m] for m in nodes if m != n] or [spread.get(n, 0.0)]
    return max(0.0, 1 - 3 * max(others))
believable = {n: believable_for(n) for n in nodes}
rows, worst = [], 0
for n in nodes:
    s_alone = med[n] / best if med[n] and best else None
    s_all = together.get(n)
    scores = [s for s in (s_alone, s_all) if s is not None]
    score = min(scores) if scores else None
    if n in wrong:
        verdict, level = "CRITICAL (wrong all-reduce result)", 2
    elif score is None:
        verdict, level = "FAILED (no measurement)", 2
    elif score < crit and score < believable[n]:
        verdict, level = "CRITICAL", 2
    elif score < warn and score < believable[n]:
        verdict, level = "WARN", 1
    else:
        verdict, level = "OK", 0
    worst = max(worst, level)
    rows.append({"node": n, "alone_images_per_s": med[n], "alone_runs": alone[n], "alone_score": s_alone,
                 "together_score": s_all, "score": score, "believable_below": believable[n],
                 "verdict": verdict, "level": level})
fmt = lambda v, f: f % v if v is not None else "-"
print(f"{'node':16} {'alone img/s':>11} {'score':>6} {'together':>8}  verdict")
for r in sorted(rows, key=lambda r: (r["score"] if r["score"] is not None else -1)):
    print(f"{r['node']:16} {fmt(r['alone_images_per_s'], '%11.0f')} {fmt(r['alone_score'], '%6.2f')} "
          f"{fmt(r['together_score'], '%8.2f')}  {r['verdict']}")
print("all-reduce between the nodes (4 MiB, one rank a node): " +
      (f"busbw {bus['busbw_GBps']:.2f} GB/s, algbw {bus['algbw_GBps']:.2f} GB/s" if bus else "not measured"))
print("all-reduce result (every rank, bit for bit against the exact sum): " +
      ("WRONG on " + "; ".join(f"{h} ({w})" for h, w in wrong.items()) if wrong else (result or "not checked")))
print(f"noise: a node's rounds differed by up to {100 * noise:.1f}% ({rounds} rounds"
      + (", each node's farthest from its median left out" if rounds >= 3 else "") + "); thresholds: WARN < "
      f"{warn:.2f}, CRITICAL < {crit:.2f}, and only below 1 - 3 x the other nodes' noise ("
      + ", ".join(f"{n} {believable[n]:.2f}" for n in nodes) + ")")
if all(r["score"] is None for r in rows):
    # Nothing measured on any node: the check failed (binary, data, srun), not the nodes.
    print(f"check_cluster: FAILED: no node gave a measurement; see {outd}/alone-*.out and {outd}/all.out",
          file=sys.stderr)
    sys.exit(3)
bad = [r["node"] for r in rows if r["level"] == worst and worst > 0]
status = ["OK", "WARN", "CRITICAL"][worst]
json.dump({"nodes": rows, "allreduce": bus, "allreduce_result": result_json, "noise": noise, "thresholds": {"warn": warn, "critical": crit,
           "believable_below": believable}, "status": status, "slow_nodes": bad}, open(path, "w"), indent=1)
print(f"check_cluster: {status}" + (f": {' '.join(bad)}" if bad else f": {len(nodes)} node(s) within the thresholds") +
      f" (JSON: {path})")
sys.exit(worst)
PY
