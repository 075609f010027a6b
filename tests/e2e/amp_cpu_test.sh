#!/usr/bin/env bash
# amp_cpu_test.sh — --amp bf16 on the CPU (oneDNN's bf16 kernels): against PyTorch's CPU autocast
# bf16 step by step on the same initial weights and samples, accuracy against fp32 training, the
# start-up line naming what runs, bit-exact resume within bf16, a bf16 checkpoint resumed in fp32
# and back, and the refusals (a CPU without bf16 units, --amp fp16, the reference kernels). The
# bf16 cases run where this CPU has AVX512-BF16 or AMX-BF16 (AMD Zen 4 and later, Intel Cooper
# Lake, Sapphire Rapids); the refusal of a CPU without them runs everywhere (ONEDNN_MAX_CPU_ISA
# hides the units).
source "$(dirname "$0")/lib.sh"
DATA="$REPO/data/dataset"
COMMON=(--device cpu --data "$DATA" --progress off)
PY=/usr/bin/python3
same_state() { h5diff -q "$1" "$2" /model /model >/dev/null && h5diff -q "$1" "$2" /optimizer /optimizer >/dev/null; }

# 1. Refusals: one clear error, exit 2, every rank gone, nothing written.
refused() {  # refused NAME PATTERN [env ...] -- ARGS...
  local name="$1" pattern="$2"; shift 2
  local envs=()
  while [[ "$1" != -- ]]; do envs+=("$1"); shift; done
  shift
  run "$name" 60 env "${envs[@]}" mpirun -np 2 "$BIN" "${COMMON[@]}" --log-dir "$TMP/$name.l" --checkpoint-dir "$TMP/$name.c" "$@"
  # A refused configuration: no checkpoint (the directory's lock file aside), no flight-recorder
  # dump (that is for failures).
  if [[ $RC -eq 2 ]] && [[ $(grep -c "mnist_ddp: error: .*$pattern" "$ERR") == 1 ]] &&
     [[ -z "$(ls "$TMP/$name.c" 2>/dev/null)" ]] && ! grep -q "flight recorder" "$ERR" &&
     [[ -z "$(ls "$TMP/$name.l"/flight-rank* 2>/dev/null)" ]] && holds "$SECS < 30"; then
    pass "$name ($(grep -m1 -o -- "$pattern.*" "$ERR" | cut -c1-150))"
  else
    fail "$name rc=$RC secs=$SECS" "$(show)"
  fi
}
# A CPU without bf16 units (AVX2 only, as oneDNN is told to see it): the error names its
# instruction set and what bf16 needs.
refused bf16_needs_bf16_units "--amp bf16: bf16 training on the CPU needs AVX512-BF16 .* or AMX-BF16 .*; this CPU offers AVX2 (ONEDNN_MAX_CPU_ISA=AVX2 limits it)" ONEDNN_MAX_CPU_ISA=AVX2 -- --amp bf16 --max-steps 1
refused fp16_has_no_cpu_units "--amp fp16: this run is on the CPU, which has no fp16 training units; use --amp bf16" -- --amp fp16 --max-steps 1
refused bf16_needs_onednn "--amp bf16 on the CPU runs on oneDNN's bf16 kernels; drop --cpu-kernels reference" -- --amp bf16 --cpu-kernels reference --max-steps 1

# This CPU's bf16 units as mnist_ddp sees them (oneDNN's dispatch: ONEDNN_MAX_CPU_ISA and the
# kernel's AMX permission count): a short bf16 run names them in its start-up line, or is refused.
run probe 120 mpirun -np 2 "$BIN" "${COMMON[@]}" --amp bf16 --max-steps 1 --data "$(small_data)" --checkpoint-dir "$TMP/probe.c" --log-dir "$TMP/probe.l"
units=$(grep -m1 -o -- "--amp bf16 on [A-Z0-9-]*" "$OUT" | sed 's/.* on //')
if [[ -z "$units" ]]; then
  if [[ $RC -eq 2 ]] && grep -q "bf16 training on the CPU needs AVX512-BF16" "$ERR"; then
    echo "skip - bf16_training (no bf16 units for oneDNN here: $(grep -m1 -o 'this CPU offers [^.]*' "$ERR"))"
    finish
  fi
  fail "bf16_probe rc=$RC: neither bf16 units in the start-up line nor the refusal" "$(show)"
  finish
fi
cpuinfo_units=$(grep -qw amx_bf16 /proc/cpuinfo && echo AMX-BF16 || (grep -qw avx512_bf16 /proc/cpuinfo && echo AVX512-BF16) || echo none)
echo "# bf16 units: $units (the CPU's flags say $cpuinfo_units${ONEDNN_MAX_CPU_ISA:+, ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA})"
if ! py_has $PY torch h5py numpy; then
  echo "skip - bf16_training (python3-torch/python3-h5py not installed)"
  finish
fi

# 2. PyTorch's CPU autocast (bf16) as the oracle, step by step: 2 ranks x 3 micro-batches of 50
#    (--accumulate 3, DDP's no_sync) for 20 steps from the same initial weights on the samples
#    mnist_ddp's ranks logged; our parameters after every step (a checkpoint each step) against
#    PyTorch's. The bound is derived in the run: D(t) = |PyTorch bf16 - PyTorch fp32| at step t is
#    how far bf16's rounding (unit roundoff 2^-8, against fp32's 2^-24) moves this trajectory by
#    step t. Ours rounds at other places (PyTorch also rounds conv outputs and the fc's to bf16;
#    ours keeps them fp32), so ours and PyTorch's are two bf16 evaluations, each about D(t) from the
#    fp32 trajectory: |ours - PyTorch bf16| <= 2 D(t) at every step. A step 10% too long (--lr
#    0.0022, in bf16) must land outside at step 20, or the check could not tell a wrong update from
#    rounding. Finer differences drown in bf16's rounding: one batch of 150 instead of 3 x 50
#    (accumulate_test.sh's control, 2e-4 away in fp32) moves the parameters about 1.5 D, and ours
#    in fp32 sits about 1 D from PyTorch's bf16, as PyTorch's own fp32 does by definition; that bf16
#    really runs is the unit tests' (bf16_ops_test.cpp) and the kernel line's to show.
SGD=(--lr 0.002 --momentum 0.5)
mkdir -p "$TMP/pt"
$PY -c "
import sys, torch
sys.path.insert(0, '$REPO/tools')
from convnet_torch import ConvNet
torch.manual_seed(7)
torch.save(ConvNet().state_dict(), '$TMP/pt/init.pt')" &&
  $PY "$REPO/tools/import_from_pytorch.py" "$TMP/pt/init.pt" -o "$TMP/pt/init.h5" >/dev/null ||
  fail "initial weights from PyTorch could not be made" "$(ls "$TMP/pt")"
OURS=(--epochs 1 --init-weights "$TMP/pt/init.h5" "${SGD[@]}" --batch-size 50 --accumulate 3 --max-steps 20 --checkpoint-every 1 --keep 100)
run ours_bf16 300 mpirun -np 2 "$BIN" "${COMMON[@]}" "${OURS[@]}" --amp bf16 --debug-sample-log "$TMP/pt/samples" --checkpoint-dir "$TMP/pt/b" --log-dir "$TMP/pt/bl"
rc_bf16=$RC
kernels=$(grep -m1 -o "device cpu (oneDNN kernels (--amp bf16 on $units): bf16 [^;)]*" "$OUT")
run ours_fp32 300 mpirun -np 2 "$BIN" "${COMMON[@]}" "${OURS[@]}" --checkpoint-dir "$TMP/pt/f" --log-dir "$TMP/pt/fl"
rc_fp32=$RC
# fp32 on a CPU with AMX: the start-up suggests --amp bf16, once; elsewhere it says nothing of it.
suggested=$(grep -c "note: this CPU has AMX-BF16 units, idle in fp32 training: --amp bf16" "$OUT")
run ours_long_step 300 mpirun -np 2 "$BIN" "${COMMON[@]}" "${OURS[@]}" --amp bf16 --lr 0.0022 --checkpoint-dir "$TMP/pt/u" --log-dir "$TMP/pt/ul"
rc_union=$RC
ORACLE=(mpirun -np 2 $PY "$REPO/tests/pytorch_oracle.py" ddp-accumulate "${SGD[@]}" --init "$TMP/pt/init.pt" --data "$DATA" --samples "$TMP/pt/samples" --batch 50 --accumulate 3 --steps 20 --every-step)
run theirs_bf16 300 "${ORACLE[@]}" --autocast-bf16 --out "$TMP/pt/bf16.npz"
rc_tb=$RC
run theirs_fp32 300 "${ORACLE[@]}" --out "$TMP/pt/fp32.npz"
cmp=$($PY - "$TMP/pt" <<'PY' 2>&1
import sys, h5py, numpy as np
d = sys.argv[1]
bf, fp = np.load(f"{d}/bf16.npz"), np.load(f"{d}/fp32.npz")
names = [k for k in bf.files if "/" not in k and "running" not in k and "tracked" not in k]
def ours(run, step):
    m = h5py.File(f"{d}/{run}/ckpt-{step:08d}.h5", "r")["model"]
    return {k: np.array(m[k], dtype=np.float64) for k in names}
def dist(a, b):  # the largest parameter difference
    return max(float(np.abs(a[k] - b[k]).max()) for k in names)
def theirs(npz, step):
    return {k: npz[f"step{step}/{k}"].astype(np.float64) for k in names}
ok, worst, worst_fp32 = True, 0.0, 0.0
for t in range(1, 21):
    D = dist(theirs(bf, t), theirs(fp, t))
    e, e32 = dist(ours("b", t), theirs(bf, t)), dist(ours("f", t), theirs(bf, t))
    ok &= D > 0 and e <= 2 * D
    worst, worst_fp32 = max(worst, e / D), max(worst_fp32, e32 / D)
D20 = dist(theirs(bf, 20), theirs(fp, 20))
u = dist(ours("u", 20), theirs(bf, 20))
print(f"ours at worst {worst:.2f} D(t) (ours in fp32: {worst_fp32:.2f} D(t)); at step 20 D = {D20:.3g}, "
      f"ours {dist(ours('b', 20), theirs(bf, 20)):.3g}; a step 10% too long: {u:.3g} = {u / D20:.1f} D")
sys.exit(0 if ok and u > 2 * D20 else 1)
PY
)
cmp_rc=$?
if [[ $rc_bf16 -eq 0 && $rc_fp32 -eq 0 && $rc_union -eq 0 && $rc_tb -eq 0 && $RC -eq 0 && $cmp_rc -eq 0 && -n "$kernels" ]]; then
  pass "matches_pytorch_cpu_autocast_bf16_every_step (20 steps, 2 ranks x 3 x 50; $cmp)"
else
  fail "matches_pytorch_cpu_autocast_bf16 rc=$rc_bf16/$rc_fp32/$rc_union/$rc_tb/$RC kernels='$kernels' cmp='$cmp'" "$(show)"
fi
want_suggested=$([[ $units == AMX-BF16 ]] && echo 1 || echo 0)
if [[ -n "$kernels" && "$suggested" == "$want_suggested" ]] && ! same_state "$TMP/pt/b/ckpt-00000020.h5" "$TMP/pt/f/ckpt-00000020.h5"; then
  pass "startup_line_names_the_bf16_kernels (${kernels#device cpu }; the parameters differ from fp32's; fp32's start-up suggests --amp bf16 $suggested time(s) on $units)"
else
  fail "startup_line_names_the_bf16_kernels kernels='$kernels' suggested=$suggested (want $want_suggested)" "$(grep -m1 'device cpu' "$TMP/ours_bf16.out")"
fi

# 3. Resume within bf16 is bit-exact: 40 steps straight, against 20 + a resume to 40 (mid-epoch).
R=(--epochs 1 --max-steps 40 --amp bf16)
run full 300 mpirun -np 2 "$BIN" "${COMMON[@]}" "${R[@]}" --checkpoint-every 20 --keep 10 --checkpoint-dir "$TMP/r/A" --log-dir "$TMP/r/Al"
full_rc=$RC
run resumed 300 mpirun -np 2 "$BIN" "${COMMON[@]}" "${R[@]}" --resume "$TMP/r/A/ckpt-00000020.h5" --checkpoint-dir "$TMP/r/B" --log-dir "$TMP/r/Bl"
if [[ $full_rc -eq 0 && $RC -eq 0 ]] && same_state "$TMP/r/A/ckpt-00000040.h5" "$TMP/r/B/ckpt-00000040.h5"; then
  pass "bf16_resume_is_bitwise_identical (from step 20 to 40, h5diff of /model and /optimizer)"
else
  fail "bf16_resume full=$full_rc rc=$RC" "$(show)"
fi

# 3b. An epoch whose last batch is short (a new geometry, its own primitives) and evaluation's
#     batches: 6,000 images on 2 ranks x 64 is 46 steps of 64 and one of 56 per rank.
run short_batch 300 mpirun -np 2 "$BIN" "${COMMON[@]}" --data "$(small_data)" --epochs 1 --batch-size 64 --amp bf16 --checkpoint-dir "$TMP/sb" --log-dir "$TMP/sbl"
if [[ $RC -eq 0 ]] && grep -q "done: 47 steps" "$OUT" && grep -q "test top-1" "$OUT"; then
  pass "bf16_short_last_batch_and_evaluation (47 steps, the last of 56 images per rank: $(grep -o 'test top-1 [0-9.]*%' "$OUT" | tail -1))"
else
  fail "bf16_short_last_batch rc=$RC" "$(show)"
fi

# 4. A bf16 checkpoint resumes in fp32 and back: the checkpoint records the precision (its stored
#    configuration), and a resume in another one says so and trains on.
stored=$($PY -c "
import h5py, json
print('amp', json.loads(h5py.File('$TMP/r/A/ckpt-00000020.h5', 'r').attrs['config'])['amp'])" 2>&1)
run to_fp32 300 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --max-steps 30 --resume "$TMP/r/A/ckpt-00000020.h5" --checkpoint-dir "$TMP/x/C" --log-dir "$TMP/x/Cl"
to32_rc=$RC
grep -q 'resume: 1 setting(s) differ .*--amp "bf16" -> "off"' "$ERR" || to32_rc=98
run back_to_bf16 300 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 1 --max-steps 40 --amp bf16 --resume "$TMP/x/C/ckpt-00000030.h5" --checkpoint-dir "$TMP/x/D" --log-dir "$TMP/x/Dl"
back_rc=$RC
grep -q 'resume: 1 setting(s) differ .*--amp "off" -> "bf16"' "$ERR" || back_rc=98
if [[ "$stored" == *bf16* && $to32_rc -eq 0 && $back_rc -eq 0 ]] && grep -q "done: 40 steps" "$OUT" &&
   [[ -f "$TMP/x/D/ckpt-00000040.h5" ]]; then
  pass "bf16_checkpoint_resumes_in_fp32_and_back (stored $stored; 20 bf16 -> 30 fp32 -> 40 bf16)"
else
  fail "bf16_fp32_round_trip stored='$stored' to32=$to32_rc back=$back_rc" "$(show)"
fi

# 5. Accuracy: 2 epochs of the real data (2 ranks x 100, the defaults) reach fp32's test top-1
#    within 0.3 points. Both runs start from the same weights and visit the same samples; what
#    separates them is bf16's rounding alone.
top1() { grep -o "done: .* test top-1 [0-9.]*%" "$1" | grep -o "[0-9.]*%$" | tr -d %; }
run acc_fp32 600 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 2 --checkpoint-dir "$TMP/a/f" --log-dir "$TMP/a/fl"
rc32=$RC; t32=$(top1 "$OUT")
run acc_bf16 600 mpirun -np 2 "$BIN" "${COMMON[@]}" --epochs 2 --amp bf16 --checkpoint-dir "$TMP/a/b" --log-dir "$TMP/a/bl"
tb=$(top1 "$OUT")
if [[ $rc32 -eq 0 && $RC -eq 0 && -n "$t32" && -n "$tb" ]] && holds "$tb >= $t32 - 0.3"; then
  pass "two_epochs_bf16_reach_fp32_top1 (bf16 $tb% against fp32 $t32%, within 0.3 points)"
else
  fail "two_epochs_bf16 rc=$rc32/$RC fp32=$t32 bf16=$tb" "$(show)"
fi
finish
