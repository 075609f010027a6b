#!/usr/bin/env bash
# accumulate_test.sh — gradient accumulation (--accumulate N, DDP's no_sync semantics): against
# PyTorch DDP with no_sync() on the same samples and initial weights (tests/pytorch_oracle.py),
# the comm record's micro-batches and bytes saved, a bit-exact resume from a mid-epoch checkpoint,
# a stop signal that waits for the step to finish, and the bad values (one clear error each).
source "$(dirname "$0")/lib.sh"
DATA="$REPO/data/dataset"
COMMON=(--device cpu --data "$DATA" --progress off)
PY=/usr/bin/python3
PARAM_BYTES=116136

# 1. PyTorch DDP with no_sync(): N = 3 micro-batches of 50 per rank, 2 ranks, 20 optimizer steps,
#    from the same initial weights (made by PyTorch, imported) on the samples each mnist_ddp rank
#    logged. PyTorch in float64 is the reference without rounding; mnist_ddp runs float32 with its
#    reference kernels (im2col + OpenBLAS). The bound is float32's own rounding spread on this
#    trajectory, measured in this run on this CPU's kernels: S = the larger of |PyTorch float32 -
#    float64| and |ours - ours with a second OpenBLAS kernel family| (other_blas_core). Ours is one
#    more float32 evaluation of the same sums, so its distance from float64 is one such spread;
#    the bound is 2 S, the second S for a kernel family that rounds worse than the two that set S
#    (SkylakeX's SGEMM carries up to 4x Haswell's error per product on this model's shapes, which
#    the |ours - ours_alt| term already sees). Measured on an AMD EPYC Zen 4: S = 2.2e-5 (PyTorch
#    float32's own), ours 3.2e-6 (Cooperlake kernels) and 1.1e-5 (SkylakeX); a different step
#    (the union batch, below) is 2e-4 away and must stay above the bound. The setting keeps the trajectory stable: at lr 0.01 and
#    momentum 0.9 float32 rounding doubles every step on this model (4e-4 after 20 steps), and the
#    union batch would be lost in it; at lr 0.002, momentum 0.5 it stays near the per-step
#    rounding. Parameters are compared absolutely; BN running statistics relative to max(1, |v|).
ACC_SGD=(--lr 0.002 --momentum 0.5)
if py_has $PY torch h5py; then
  mkdir -p "$TMP/pt"
  $PY -c "
import sys, torch
sys.path.insert(0, '$REPO/tools')
from convnet_torch import ConvNet
torch.manual_seed(7)
torch.save(ConvNet().state_dict(), '$TMP/pt/init.pt')"
  $PY "$REPO/tools/import_from_pytorch.py" "$TMP/pt/init.pt" -o "$TMP/pt/init.h5" >/dev/null
  ORACLE_RUN=(--epochs 1 --init-weights "$TMP/pt/init.h5" --cpu-kernels reference "${ACC_SGD[@]}" --batch-size 50 --max-steps 20)
  run ours 300 mpirun -np 2 "$BIN" "${COMMON[@]}" "${ORACLE_RUN[@]}" --accumulate 3 --debug-sample-log "$TMP/pt/samples" --checkpoint-dir "$TMP/pt/c" --log-dir "$TMP/pt/l"
  ours_rc=$RC
  alt_core=$(other_blas_core)
  run ours_alt 300 env OPENBLAS_CORETYPE="$alt_core" mpirun -np 2 "$BIN" "${COMMON[@]}" "${ORACLE_RUN[@]}" --accumulate 3 --checkpoint-dir "$TMP/pt/alt" --log-dir "$TMP/pt/altl"
  alt_rc=$RC
  ORACLE=(mpirun -np 2 $PY "$REPO/tests/pytorch_oracle.py" ddp-accumulate "${ACC_SGD[@]}" --init "$TMP/pt/init.pt" --data "$DATA" --samples "$TMP/pt/samples" --batch 50 --accumulate 3 --steps 20)
  run theirs32 300 "${ORACLE[@]}" --out "$TMP/pt/theirs32.npz"
  t32_rc=$RC
  run theirs 300 "${ORACLE[@]}" --float64 --out "$TMP/pt/theirs.npz"
  # Parameters, rank 0's BN running statistics (updated by every micro-batch's forward) and
  # num_batches_tracked (20 x 3 forwards); the comparison's own exit status decides. It leaves
  # the bounds in $TMP/pt/bounds for the union check below.
  cmp=$($PY - "$TMP/pt/c/ckpt-00000020.h5" "$TMP/pt/alt/ckpt-00000020.h5" "$TMP/pt/theirs.npz" "$TMP/pt/theirs32.npz" "$TMP/pt/bounds" <<'PY' 2>&1
import sys, h5py, numpy as np
ours, alt = ({k: np.array(v) for k, v in h5py.File(p, "r")["model"].items()} for p in sys.argv[1:3])
ref, ref32 = np.load(sys.argv[3]), np.load(sys.argv[4])
def dist(a, b, k):
    d = float(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)).max())
    return d / max(1.0, float(np.abs(b[k]).max())) if "running" in k else d
groups = {"params": [k for k in ref.files if "running" not in k and "tracked" not in k],
          "BN statistics": [k for k in ref.files if "running" in k]}
def worst(a, b, keys):
    k = max(keys, key=lambda k: dist(a, b, k))
    return dist(a, b, k), k
ok, out, bounds = True, [], []
for name, keys in groups.items():
    err, at = worst(ours, ref, keys)
    spread = max(worst(ref32, ref, keys)[0], worst(ours, alt, keys)[0])
    bound = 2 * spread
    bounds.append(bound)
    ok &= bool(np.isfinite(err) and err <= bound and spread > 0)
    out.append(f"{name} {err:.3g} at {at} (bound 2 x spread {spread:.3g} = {bound:.3g})")
tracked = {k: (int(ours[k]), int(ref[k])) for k in ref.files if k.endswith("num_batches_tracked")}
ok &= set(tracked.values()) == {(60, 60)} and len(groups["params"]) == 10 and len(groups["BN statistics"]) == 4
open(sys.argv[5], "w").write(f"{bounds[0]} {bounds[1]}\n")
print("; ".join(out) + f"; num_batches_tracked {sorted(set(tracked.values()))}")
sys.exit(0 if ok else 1)
PY
)
  cmp_rc=$?
  samples=$(cat "$TMP/pt/samples"/samples-epoch1-rank*.txt 2>/dev/null | wc -l)
  if [[ $ours_rc -eq 0 && $alt_rc -eq 0 && $t32_rc -eq 0 && $RC -eq 0 && $samples == 6000 && $cmp_rc -eq 0 ]]; then
    pass "matches_pytorch_ddp_no_sync (N=3, 2 ranks x 3 x 50 images x 20 steps = $samples samples; OpenBLAS $(blas_core), second family $alt_core: $cmp)"
  else
    fail "matches_pytorch_ddp_no_sync ours=$ours_rc alt=$alt_rc theirs32=$t32_rc theirs=$RC samples=$samples cmp='$cmp'" "$(show)"
  fi
  # The same run without accumulation (one micro-batch of 150) is a different trajectory (BN
  # normalises per micro-batch): it must land outside the bound above, or that check could not
  # tell a wrong step from rounding.
  run union 300 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --init-weights "$TMP/pt/init.h5" --cpu-kernels reference "${ACC_SGD[@]}" --batch-size 150 --max-steps 20 --checkpoint-dir "$TMP/pt/u" --log-dir "$TMP/pt/ul"
  read -r pbound _ <"$TMP/pt/bounds" 2>/dev/null || pbound=""
  ucmp=$($PY -c "
import h5py, numpy as np
ours = h5py.File('$TMP/pt/u/ckpt-00000020.h5', 'r')['model']
theirs = np.load('$TMP/pt/theirs.npz')
print(f\"{max(float(np.abs(np.array(ours[k]) - theirs[k]).max()) for k in theirs.files if 'running' not in k and 'tracked' not in k):.3g}\")" 2>&1)
  if [[ $RC -eq 0 && -n "$pbound" ]] && holds "$ucmp > $pbound"; then
    pass "one_batch_of_150_is_not_the_same_step (max |difference| $ucmp, above the bound $(printf '%.3g' "$pbound"): the check above can fail)"
  else
    fail "one_batch_of_150 rc=$RC ucmp=$ucmp bound=$pbound" "$(show)"
  fi
else
  echo "skip - matches_pytorch_ddp_no_sync (python3-torch/python3-h5py not installed)"
fi

# 2. What a step is: 2 ranks x 2 micro-batches of 100: 150 steps per epoch; the comm record
#    counts micro-batches and the all-reduces not made; the log says so.
run counts 300 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --accumulate 2 --max-steps 40 --checkpoint-dir "$TMP/n/c" --log-dir "$TMP/n/l"
rec=$(python3 -c "
import json
r = [json.loads(l) for l in open('$TMP/n/l/metrics.jsonl') if '\"comm\"' in l][-1]
print(r['steps'], r['micro_batches'], r['accumulate'], r['payload_bytes'], r['saved_bytes'])" 2>&1)
if [[ $RC -eq 0 && "$rec" == "40 80 2 $((40 * PARAM_BYTES)) $((40 * PARAM_BYTES))" ]] &&
   grep -q "training: 1 epoch(s) x 150 steps/epoch = 40 steps (capped by --max-steps), batch 100 per rank x 2 micro-batches per step (--accumulate: one all-reduce per step) (400 global)" "$OUT" &&
   grep -q "comm epoch 1: .*, 2 micro-batches per step: 4.6 MB not all-reduced" "$OUT" &&
   grep -q "checkpoint (end): .*ckpt-00000040.h5 (step 40; resumes at epoch 1, sample 8000 per rank)" "$OUT"; then
  pass "steps_count_optimizer_steps_and_comm_says_what_was_saved (steps, micro-batches, N, payload, saved: $rec)"
else
  fail "steps_count rc=$RC rec='$rec'" "$(show)"
fi

# 3. Resume bit-exact with N = 2 from a mid-epoch checkpoint (step 25 of 150), to step 60.
same_state() { h5diff -q "$1" "$2" /model /model >/dev/null && h5diff -q "$1" "$2" /optimizer /optimizer >/dev/null; }
run full 300 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --accumulate 2 --max-steps 60 --checkpoint-every 25 --keep 10 --checkpoint-dir "$TMP/r/A" --log-dir "$TMP/r/Al"
full_rc=$RC
run resumed 300 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --accumulate 2 --max-steps 60 --resume "$TMP/r/A/ckpt-00000025.h5" --checkpoint-dir "$TMP/r/B" --log-dir "$TMP/r/Bl"
if [[ $full_rc -eq 0 && $RC -eq 0 ]] && same_state "$TMP/r/A/ckpt-00000060.h5" "$TMP/r/B/ckpt-00000060.h5" &&
   ! same_state "$TMP/r/A/ckpt-00000050.h5" "$TMP/r/A/ckpt-00000060.h5"; then
  pass "resume_mid_epoch_is_bitwise_identical (N=2, from step 25 of 150 to 60, h5diff)"
else
  fail "resume_mid_epoch full=$full_rc rc=$RC" "$(show)"
fi

# 3b. The same checkpoint on 4 ranks: the 2 x 25 x 200 = 10,000 samples consumed re-derive the
#     position (2,500 per rank), then 10 more steps of 4 x 2 x 100 add 2,000 per rank.
run world4 300 mpirun -np 4 --oversubscribe "$BIN" "${COMMON[@]}" --epochs 1 --accumulate 2 --max-steps 35 --resume "$TMP/r/A/ckpt-00000025.h5" --checkpoint-dir "$TMP/r/W" --log-dir "$TMP/r/Wl"
if [[ $RC -eq 0 ]] && grep -q "checkpoint written by 2 ranks, now 4" "$OUT" && grep -q "done: 35 steps" "$OUT" &&
   grep -q "ckpt-00000035.h5 (step 35; resumes at epoch 1, sample 4500 per rank)" "$OUT"; then
  pass "resume_on_another_world_size (2 -> 4 ranks: sample 2500 + 10 x 200 = 4500 per rank at step 35)"
else
  fail "resume_on_another_world_size rc=$RC" "$(show)"
fi

# 4. SIGTERM lands during a step's micro-batches: the step finishes first; the checkpoint sits on
#    a step boundary (sample offset = steps x 2 x 100) and resumes from there.
(timeout 180 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --accumulate 2 --checkpoint-dir "$TMP/s" --log-dir "$TMP/sl" >"$TMP/s.out" 2>&1; echo $? >"$TMP/s.rc") &
for _ in $(seq 300); do [[ -s "$TMP/sl/mnist_train.log" ]] && grep -q "step 50/" "$TMP/sl/mnist_train.log" && break; sleep 0.1; done
pid=$(ps -eo pid=,comm=,args= | grep -F -- "--checkpoint-dir $TMP/s" | awk '$2 == "mnist_ddp" { print $1 }' | tail -1)
kill -TERM "$pid"
wait
line=$(grep -o "checkpoint (SIGTERM): .*" "$TMP/s.out")
step=$(grep -o "(step [0-9]*;" <<<"$line" | grep -o "[0-9]*")
if [[ "$(cat "$TMP/s.rc")" == 143 && -n "$step" ]] && grep -q "resumes at epoch 1, sample $((step * 200)) per rank" <<<"$line"; then
  pass "sigterm_finishes_the_step_first (stopped at step $step: sample $((step * 200)) per rank)"
else
  fail "sigterm rc=$(cat "$TMP/s.rc") line='$line'" "$(tail -5 "$TMP/s.out")"
fi

# 5. The compression hook runs once per optimizer step, on the step's summed gradient, as after
#    no_sync(): with N = 2 the fp16 hook and PowerSGD (its warm-up counted in optimizer steps:
#    --powersgd-start-iter 10 uncompressed steps, then compressed) hand all-reduce exactly the
#    bytes of as many steps without accumulation, and twice as many micro-batches ran. Were the
#    hook run per micro-batch, or PowerSGD's counter advanced per micro-batch, the bytes would differ.
for hook in fp16 powersgd; do
  H=(--compression "$hook" --powersgd-start-iter 10 --epochs 1 --max-steps 20)
  run "${hook}_n1" 300 mpirun -np 2 "$BIN" "${COMMON[@]}" "${H[@]}" --checkpoint-dir "$TMP/h/$hook-1c" --log-dir "$TMP/h/$hook-1l"
  rc1=$RC
  run "${hook}_n2" 300 mpirun -np 2 "$BIN" "${COMMON[@]}" "${H[@]}" --accumulate 2 --checkpoint-dir "$TMP/h/$hook-2c" --log-dir "$TMP/h/$hook-2l"
  read -r b1 b2 micro steps <<<"$(python3 -c "
import json
def comm(d): return [json.loads(l) for l in open(d + '/metrics.jsonl') if '\"comm\"' in l][-1]
a, b = comm('$TMP/h/$hook-1l'), comm('$TMP/h/$hook-2l')
print(a['payload_bytes'], b['payload_bytes'], b['micro_batches'], b['steps'])" 2>&1)"
  if [[ $hook == fp16 ]]; then want="$b2 == 20 * $PARAM_BYTES / 2"; else want="$b2 > 10 * $PARAM_BYTES && $b2 < 20 * $PARAM_BYTES"; fi
  if [[ $rc1 -eq 0 && $RC -eq 0 && "$b1" == "$b2" && "$micro $steps" == "40 20" ]] && holds "$want"; then
    pass "${hook}_hook_runs_once_per_optimizer_step (20 steps of 2 micro-batches: $b2 bytes, as 20 steps of 1)"
  else
    fail "${hook}_hook_once_per_step rc=$rc1/$RC bytes=$b1/$b2 micro/steps=$micro/$steps" "$(show)"
  fi
done

# 5b. Post-local SGD's schedule counts optimizer steps (4 ranks as 2 "nodes" of 2, the test seam of
#     train_test.sh): global all-reduce for 9 steps, then node-local averaging with a global
#     parameter average after steps 9, 14, 19 (0-based), so with N = 2 all replicas agree at step
#     counts 10, 15, 20 and the nodes differ at 12. Counted in micro-batches, the averages would fall
#     after steps 4, 7, 9, ... instead.
LS=(--epochs 1 --max-steps 20 --accumulate 2 --local-sgd-start 9 --local-sgd-period 5)
run acc_local_sgd_synced 300 env MNIST_DDP_TEST_RANKS_PER_NODE=2 mpirun -np 4 --oversubscribe "$BIN" "${COMMON[@]}" "${LS[@]}" --check-replicas 5 --log-dir "$TMP/ls/1l" --checkpoint-dir "$TMP/ls/1c"
rc_synced=$RC; out_synced="$(show)"
grep -q "within groups of 2 rank(s)" "$OUT" || rc_synced=99
run acc_local_sgd_between 300 env MNIST_DDP_TEST_RANKS_PER_NODE=2 mpirun -np 4 --oversubscribe "$BIN" "${COMMON[@]}" "${LS[@]}" --check-replicas 3 --log-dir "$TMP/ls/2l" --checkpoint-dir "$TMP/ls/2c"
if [[ $rc_synced -eq 0 ]] && [[ $RC -eq 3 ]] && grep -q "after step 12 the parameters of rank(s) 2, 3 differ" "$ERR" "$OUT"; then
  pass "local_sgd_schedule_counts_optimizer_steps (N=2: replicas equal at 10, 15, 20; nodes differ at 12)"
else
  fail "local_sgd_schedule synced_rc=$rc_synced between_rc=$RC" "$out_synced$(show)"
fi

# 6. PowerSGD's per-rank state (error feedback, warm-started Q) with N = 2 resumes bit for bit from
#    a checkpoint after its warm-up.
P=(--compression powersgd --powersgd-start-iter 10 --epochs 1 --accumulate 2)
run psgd_full 300 mpirun -np 2 "$BIN" "${COMMON[@]}" "${P[@]}" --max-steps 40 --checkpoint-every 20 --keep 10 --checkpoint-dir "$TMP/p/A" --log-dir "$TMP/p/Al"
full_rc=$RC
run psgd_resumed 300 mpirun -np 2 "$BIN" "${COMMON[@]}" "${P[@]}" --max-steps 40 --resume "$TMP/p/A/ckpt-00000020.h5" --checkpoint-dir "$TMP/p/B" --log-dir "$TMP/p/Bl"
a="$TMP/p/A/ckpt-00000040.h5" b="$TMP/p/B/ckpt-00000040.h5"
if [[ $full_rc -eq 0 && $RC -eq 0 ]] && same_state "$a" "$b" && h5diff -q "$a" "$b" /rank /rank >/dev/null &&
   h5ls "$TMP/p/A/ckpt-00000020.h5/rank/1" | grep -q "powersgd_error_0"; then
  pass "powersgd_resume_is_bitwise_identical (N=2, from step 20 to 40, per-rank state in /rank/<r>)"
else
  fail "powersgd_resume full=$full_rc rc=$RC" "$(show)"
fi

# 7. Bad values: one clear error naming the flag, non-zero, every rank gone, nothing written.
bad() {  # bad NAME PATTERN ARGS...
  local name="$1" pattern="$2"; shift 2
  run "$name" 60 mpirun -np 2 "$BIN" "${COMMON[@]}" --log-dir "$TMP/$name.l" --checkpoint-dir "$TMP/$name.c" "$@"
  if [[ $RC -eq 2 ]] && [[ $(grep -c "mnist_ddp: error: .*$pattern" "$ERR") == 1 ]] && [[ ! -e "$TMP/$name.c" ]] && holds "$SECS < 30"; then
    pass "$name ($(grep -m1 -o -- "$pattern.*" "$ERR" | cut -c1-100))"
  else
    fail "$name rc=$RC secs=$SECS" "$(show)"
  fi
}
bad accumulate_zero "--accumulate: Value 0 not in range" --accumulate 0
bad accumulate_negative "--accumulate" --accumulate -2
bad accumulate_not_a_number "--accumulate" --accumulate three
bad accumulate_with_eval_only "--accumulate 4 shapes training steps; --eval-only trains nothing" --accumulate 4 --eval-only --resume auto
bad accumulate_too_large "--batch-size 60000 x --accumulate 4000 = 240000000 images per rank per step" --batch-size 60000 --accumulate 4000
finish
