#!/usr/bin/env bash
# chaos_test.sh — randomised fault injection (`make test-chaos`). CHAOS_RUNS (default 20) training
# runs on 2 CPU ranks (150 steps over 5 epochs of the 6,000-image subset, so faults also meet
# epoch-end checkpoints), each hit at a random moment (a random step, then a random 0-300 ms) by one
# fault drawn at random: kill -9 of a random rank, SIGTERM to a random rank, SIGTERM to mpirun,
# a full disk during a checkpoint write (a tmpfs sized to fill at a random checkpoint), or a
# stuck rank (SIGSTOP). After each: the job must be gone within the watchdog time (plus a grace),
# no rank may remain, every checkpoint left must pass --verify-checkpoints, the newest checkpoint
# from before the fault must survive (or a newer one: --keep 3 rotates), and --resume auto must finish the run bit for bit equal (h5diff of
# model and optimizer) to an uninterrupted run. The seed is printed; CHAOS_SEED=S reproduces.
# CHAOS_DEADLINE (seconds since the epoch, optional): no run starts that would end after it, going
# by the longest run so far, once CHAOS_MIN_RUNS (default 3) have run; CI sets it so that a slow
# machine runs fewer of its 8 runs rather than pass its 30 minutes. The runs that do run are the
# first ones of that seed's sequence (CHAOS_RUNS=N with the seed reproduces them).
source "$(dirname "$0")/../e2e/lib.sh"
DATA="$(small_data)"
SEED="${CHAOS_SEED:-$(($(date +%s) % 100000))}"
K="${CHAOS_RUNS:-20}"
DEADLINE="${CHAOS_DEADLINE:-}"
MIN_RUNS="${CHAOS_MIN_RUNS:-3}"
for v in "$K" "$MIN_RUNS" ${DEADLINE:+"$DEADLINE"}; do
  # No leading zeros: bash arithmetic reads 08 as a bad octal number.
  [[ "$v" =~ ^(0|[1-9][0-9]*)$ ]] || { echo "chaos_test: CHAOS_RUNS, CHAOS_MIN_RUNS and CHAOS_DEADLINE take whole numbers without leading zeros (got '$v')" >&2; exit 2; }
done
((MIN_RUNS >= 1)) || { echo "chaos_test: CHAOS_MIN_RUNS must be at least 1 (got $MIN_RUNS): the deadline is judged by the longest run so far" >&2; exit 2; }
RANDOM=$SEED  # bash's generator: the same seed draws the same faults, ranks, steps and delays
STEPS=150
EVERY=20
WATCHDOG=5
GRACE=25  # mpirun's teardown and the sanitizer-free exit of the survivors
KINDS=(kill9_rank sigterm_rank sigterm_mpirun full_disk stuck_rank)
COMMON=(--device cpu --data "$DATA" --epochs 5 --max-steps "$STEPS" --checkpoint-every "$EVERY"
  --keep 3 --progress off --log-every 1 --collective-timeout "$WATCHDOG")
MOUNTS=()
cleanup() {
  pkill -9 -f -- "--checkpoint-dir $TMP/" 2>/dev/null
  sleep 0.5
  # Lazily: a mount still busy must not leave rm -rf emptying it.
  for m in "${MOUNTS[@]}"; do umount -l "$m" 2>/dev/null; done
  [[ -n "${MNIST_DDP_E2E_KEEP:-}" ]] || rm -rf "$TMP"
}
trap cleanup EXIT
echo "chaos seed $SEED ($K runs; CHAOS_SEED=$SEED CHAOS_RUNS=$K reproduces)"

same_state() {
  h5diff -q "$1" "$2" /model /model >/dev/null && h5diff -q "$1" "$2" /optimizer /optimizer >/dev/null
}
# ranks DIR: pids of the live (non-zombie) mnist_ddp processes of the run writing to DIR.
ranks() { ps -eo pid=,stat=,comm=,args= | awk -v m="--checkpoint-dir $1 " '$2 !~ /^Z/ && $3 == "mnist_ddp" && index($0 " ", m) { print $1 }'; }
launcher() { ps -eo pid=,comm=,args= | awk -v m="--checkpoint-dir $1 " '$2 == "mpirun" && index($0 " ", m) { print $1 }'; }
newest_step() { ls "$1"/ckpt-*.h5 2>/dev/null | sed -E 's/.*ckpt-0*([0-9]+)\.h5/\1/' | sort -n | tail -1; }

run ref 600 mpirun -np 2 "$BIN" "${COMMON[@]}" --checkpoint-dir "$TMP/ref" --log-dir "$TMP/ref/log"
REF="$TMP/ref/ckpt-$(printf %08d $STEPS).h5"
if [[ $RC -ne 0 || ! -f "$REF" ]]; then
  fail "uninterrupted reference run rc=$RC" "$(show)"
  echo "end - $(basename "$0" .sh)"
  exit 1
fi
CKPT_BYTES=$(stat -c %s "$REF")
can_mount=0
mkdir -p "$TMP/probe" && mount -t tmpfs -o size=64k tmpfs "$TMP/probe" 2>/dev/null && umount "$TMP/probe" && can_mount=1

declare -A by_kind=()
verified=0
exact=0
lost=0
bad=0
done_runs=0
longest=0  # seconds of the longest run so far (the fault, the checks, the resume)
deadline_note=""
for i in $(seq 1 "$K"); do
  if [[ -n "$DEADLINE" ]] && ((done_runs >= MIN_RUNS && $(date +%s) + longest > DEADLINE)); then
    deadline_note=" (stopped at CHAOS_DEADLINE: run $i would take ~${longest} s more; $((K - done_runs)) of $K runs left out)"
    echo "chaos: $done_runs of $K runs done, the next would end after CHAOS_DEADLINE (the longest run took ${longest} s)"
    break
  fi
  run_t0=$SECONDS
  kind=${KINDS[RANDOM % ${#KINDS[@]}]}
  at=$((2 + RANDOM % (STEPS - 40)))
  # mpirun forwards a SIGTERM to the ranks ~2 s later (Open MPI 4.1): an early step, so that it
  # still lands during training.
  [[ $kind == sigterm_mpirun ]] && at=$((2 + at % 60))
  delay_ms=$((RANDOM % 300))
  victim=$((RANDOM % 2))
  fill=$((2 + RANDOM % 3))  # full_disk: the tmpfs holds fill-1 checkpoints and a half
  dir="$TMP/run$i"
  mkdir -p "$dir"
  env_seam=()
  what="$kind"
  problems=()
  if [[ $kind == full_disk ]]; then
    if ((can_mount)); then
      kib=$(((fill - 1) * CKPT_BYTES / 1024 + CKPT_BYTES / 2048 + 8))
      if mount -t tmpfs -o "size=${kib}k" tmpfs "$dir"; then
        MOUNTS+=("$dir")
      else
        problems+=("the ${kib} KiB tmpfs could not be mounted: no fault")
      fi
      what="full_disk (${kib} KiB tmpfs: checkpoint $fill cannot be written)"
    else
      env_seam=(MNIST_DDP_TEST_FAIL_CHECKPOINT=enospc)
      what="full_disk (not root: the ENOSPC test seam at the first checkpoint)"
    fi
  fi
  by_kind[$kind]=$((${by_kind[$kind]:-0} + 1))
  (env "${env_seam[@]}" timeout 600 mpirun -np 2 "$BIN" "${COMMON[@]}" --checkpoint-dir "$dir" \
    --log-dir "$TMP/log$i" >"$TMP/run$i.out" 2>&1; echo $? >"$TMP/run$i.rc") &
  job=$!
  t_fault=""
  before=""
  if [[ $kind != full_disk ]]; then
    for _ in $(seq 1200); do
      grep -q "\"step\":$at[,}]" "$TMP/log$i/metrics.jsonl" 2>/dev/null && break
      [[ -f "$TMP/run$i.rc" ]] && break
      sleep 0.05
    done
    sleep "$(awk -v m="$delay_ms" 'BEGIN { printf "%.3f", m / 1000 }')"
    before=$(newest_step "$dir")
    mapfile -t pids < <(ranks "$dir")
    target="${pids[$victim]:-}"
    [[ $kind == sigterm_mpirun ]] && target="$(launcher "$dir")"
    t_fault=$(date +%s.%N)
    # Never a bare `kill 0` (the whole process group, CI included): a run that ended before its
    # fault is a failure of its own.
    if [[ "$target" =~ ^[0-9]+$ ]]; then
      case $kind in
        kill9_rank) kill -9 "$target" 2>/dev/null ;;
        sigterm_rank | sigterm_mpirun) kill -TERM "$target" 2>/dev/null ;;
        stuck_rank) kill -STOP "$target" 2>/dev/null ;;
      esac
    else
      problems+=("fault not delivered: no process to hit (the run ended before step $at?)")
    fi
  else
    t_fault=$(date +%s.%N)
  fi
  wait "$job"
  gone=$(elapsed "$t_fault")
  rc=$(cat "$TMP/run$i.rc")
  sleep 0.5
  left=$(ranks "$dir" | wc -l)
  [[ $left -gt 0 ]] && kill -9 $(ranks "$dir") 2>/dev/null
  # Every checkpoint the fault left must load and verify (one process, no peers).
  vout=$(timeout 120 "$BIN" --verify-checkpoints --checkpoint-dir "$dir" 2>&1)
  vrc=$?
  nver=$(grep -c "^ok " <<<"$vout")
  after=$(newest_step "$dir")
  # Resume where the fault left it (a full tmpfs is first copied to a disk with room, as a user
  # would free space), then compare the end with the uninterrupted run.
  rdir="$dir"
  if [[ $kind == full_disk && $can_mount == 1 ]]; then
    rdir="$TMP/resume$i"; mkdir -p "$rdir"; cp "$dir"/ckpt-*.h5 "$rdir"/ 2>/dev/null
    umount "$dir"
  fi
  run "resume$i" 600 mpirun -np 2 "$BIN" "${COMMON[@]}" --resume auto --checkpoint-dir "$rdir" --log-dir "$TMP/log$i"
  from=$(grep -oE "resume: step [0-9]+" "$OUT" | grep -oE "[0-9]+$")
  final="$rdir/ckpt-$(printf %08d $STEPS).h5"
  [[ $rc -ne 0 || $kind == full_disk ]] || [[ $kind == sigterm_rank || $kind == sigterm_mpirun ]] ||
    problems+=("the faulted run exited 0")
  holds "$gone < $WATCHDOG + $GRACE" || problems+=("job took ${gone}s to go (bound $((WATCHDOG + GRACE)) s)")
  ((left == 0)) || problems+=("$left rank(s) left running")
  ((vrc == 0)) || problems+=("--verify-checkpoints exit $vrc: $(grep BAD <<<"$vout" | head -2)")
  if [[ -n "$before" ]] && { [[ -z "$after" ]] || ((after < before)); }; then
    problems+=("lost: newest checkpoint was step $before before the fault, $after after")
    lost=$((lost + 1))
  fi
  if [[ $RC -eq 0 ]] && same_state "$REF" "$final"; then
    exact=$((exact + 1))
  else
    problems+=("resume rc=$RC did not end bit-exact ($(tail -2 "$ERR" | tr '\n' ' '))")
  fi
  verified=$((verified + nver))
  summary="$what after step $at+${delay_ms}ms (rank process $((victim + 1)) of 2 by pid): exit $rc, gone in ${gone%??????}s, $nver checkpoint(s) verified, resumed from step ${from:-0}"
  if ((${#problems[@]} == 0)); then
    pass "run $i: $summary, bit-exact"
  else
    bad=$((bad + 1))
    fail "run $i: $summary" "${problems[@]}" "--- faulted run:" "$(tail -8 "$TMP/run$i.out")"
  fi
  done_runs=$i
  ((SECONDS - run_t0 > longest)) && longest=$((SECONDS - run_t0))
done
faults=""
for k in "${KINDS[@]}"; do faults+=" $k ${by_kind[$k]:-0},"; done
echo "chaos seed $SEED: $done_runs runs$deadline_note; faults:${faults%,}; checkpoints verified $verified; resumes bit-exact $exact/$done_runs; $lost lost; $bad failed"
if ((bad)); then echo "end - $(basename "$0" .sh)"; exit 1; fi
finish
