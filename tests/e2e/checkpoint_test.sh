#!/usr/bin/env bash
# checkpoint_test.sh — the user's training state is never lost: bitwise-exact resume under
# mpirun -np 2 (after --max-steps and after a SIGTERM to one rank), fallback past a truncated or
# bit-flipped newest file, an unwritable directory refused before training, a full disk leaving
# the previous checkpoint intact, kill -9 of one rank ending the job with older checkpoints
# intact, a second signal stopping at once, resume with another world size, an incompatible file
# refused, and the PyTorch export reproducing mnist_ddp's accuracy. On the 6,000-image subset
# (tests/e2e/lib.sh small_data: 30 steps an epoch), so every case crosses epoch boundaries quickly.
source "$(dirname "$0")/lib.sh"
DATA="$(small_data)"
PY=/usr/bin/python3
MOUNTS=()
cleanup_mounts() { for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup_mounts EXIT
COMMON=(--device cpu --data "$DATA" --epochs 3 --progress off)

# train NAME CKPT_DIR ARGS... : 2 ranks, logs beside the checkpoints
train() {
  local name="$1" dir="$2"; shift 2
  run "$name" 300 mpirun -np 2 "$BIN" "${COMMON[@]}" --checkpoint-dir "$dir" --log-dir "$dir/log" "$@"
}
same_state() {  # two checkpoints hold bitwise-identical model and optimizer state
  h5diff -q "$1" "$2" /model /model >/dev/null && h5diff -q "$1" "$2" /optimizer /optimizer >/dev/null
}
close_state() {  # ... equal within MODEL_TOL on /model and OPT_TOL on /optimizer, every element
  h5diff -q -d "$3" "$1" "$2" /model /model >/dev/null &&
    h5diff -q -d "$4" "$1" "$2" /optimizer /optimizer >/dev/null
}
alive() {  # live (non-zombie) mnist_ddp processes of this test run, by a marker in their argv
  ps -eo stat=,args= | awk -v m="$1" '$1 !~ /^Z/ && index($0, m) && index($0, "mnist_ddp")' | grep -v awk
}

# --- bitwise resume ---------------------------------------------------------------------------
train full "$TMP/A" --max-steps 75
[[ $RC -eq 0 ]] || fail "uninterrupted run rc=$RC" "$(show)"
train stop40 "$TMP/B" --max-steps 40
train resume40 "$TMP/B" --max-steps 75 --resume auto
if [[ $RC -eq 0 ]] && grep -q "resume: step 40, epoch 2, sample 1000" "$OUT" &&
   same_state "$TMP/A/ckpt-00000075.h5" "$TMP/B/ckpt-00000075.h5" &&
   ! same_state "$TMP/A/ckpt-00000060.h5" "$TMP/A/ckpt-00000075.h5"; then
  pass "resume_after_max_steps_is_bitwise_identical (2 ranks, across an epoch boundary, h5diff)"
else
  fail "resume_after_max_steps_is_bitwise_identical rc=$RC" "$(show)"
fi

# PowerSGD keeps per-rank state (error feedback, warm-started Q): resume must restore each rank's
# from /rank/<r>/ or the next steps differ. Under the sanitizers (tests/run_sanitized.sh sets
# MNIST_DDP_SANITIZER) one hook: the batched fp16 one saves and restores through the same code.
hooks=(powersgd batched_powersgd_fp16)
if [[ -n "${MNIST_DDP_SANITIZER:-}" ]]; then
  hooks=(powersgd)
  echo "skip - resume_with_batched_powersgd_fp16 (its state takes powersgd's save and restore path: the $MNIST_DDP_SANITIZER run leaves it to make test)"
fi
for hook in "${hooks[@]}"; do
  P=(--compression "$hook" --powersgd-start-iter 10)
  train "${hook}_full" "$TMP/$hook-A" --max-steps 50 "${P[@]}"
  train "${hook}_stop" "$TMP/$hook-B" --max-steps 25 "${P[@]}"
  train "${hook}_resume" "$TMP/$hook-B" --max-steps 50 --resume auto "${P[@]}"
  a="$TMP/$hook-A/ckpt-00000050.h5" b="$TMP/$hook-B/ckpt-00000050.h5"
  if [[ $RC -eq 0 ]] && same_state "$a" "$b" && h5diff -q "$a" "$b" /rank /rank >/dev/null &&
     h5ls "$TMP/$hook-B/ckpt-00000025.h5/rank/1" | grep -q "powersgd_error_0" &&
     ! h5diff -q "$TMP/$hook-B/ckpt-00000025.h5" "$TMP/$hook-B/ckpt-00000025.h5" /rank/0 /rank/1 >/dev/null; then
    pass "resume_with_${hook}_state_is_bitwise_identical (2 ranks, per-rank error feedback in /rank/<r>)"
  else
    fail "resume_with_${hook}_state rc=$RC" "$(show)"
  fi
done
# PowerSGD state from other buckets (--bucket-cap-kb changed): one clear error, file untouched.
sum_before=$(md5sum "$TMP/powersgd-B/ckpt-00000050.h5")
train powersgd_other_buckets "$TMP/powersgd-B" --max-steps 60 --resume auto --compression powersgd --powersgd-start-iter 10 --bucket-cap-kb 200
if [[ $RC -eq 2 ]] && [[ $(grep -c "mnist_ddp: error:" "$ERR") -eq 1 ]] &&
   grep -q "does not belong to this PowerSGD configuration" "$ERR" &&
   [[ "$(md5sum "$TMP/powersgd-B/ckpt-00000050.h5")" == "$sum_before" ]]; then
  pass "powersgd_state_of_other_buckets_is_one_clear_error"
else
  fail "powersgd_other_buckets rc=$RC" "$(show)"
fi

# SIGTERM to one rank: checkpoint, exit 143 on every rank, nothing left running; then resume.
(cd "$TMP" && timeout 300 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 75 --log-every 10 --checkpoint-dir "$TMP/C" --log-dir "$TMP/C/log" >"$TMP/sig.out" 2>&1; echo $? >"$TMP/sig.rc") &
for _ in $(seq 100); do [[ -f "$TMP/C/log/metrics.jsonl" ]] && grep -q '"step":20' "$TMP/C/log/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
pid=$(ps -eo pid=,args= | grep -F -- "--checkpoint-dir $TMP/C" | grep -v -e grep -e mpirun | awk 'NR==2{print $1}')
kill -TERM "$pid" 2>/dev/null
t0=$(date +%s.%N); wait; secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
sleep 1
left=$(alive "$TMP/C" | wc -l)
ck=$(ls "$TMP/C"/ckpt-*.h5 2>/dev/null | tail -1)
if [[ "$(cat "$TMP/sig.rc")" != 0 ]] && grep -q "SIGTERM received: stopping at step" "$TMP/sig.out" &&
   grep -q "Exit code:    143" "$TMP/sig.out" && [[ -n "$ck" && "$left" == 0 ]] && awk -v s="$secs" 'BEGIN { exit !(s < 30) }'; then
  pass "sigterm_to_one_rank_checkpoints_and_exits_143 (${secs%??????}s, $(basename "$ck"))"
else
  fail "sigterm_to_one_rank rc=$(cat "$TMP/sig.rc") left=$left ck=$ck secs=$secs" "$(tail -20 "$TMP/sig.out")"
fi
train resume_sig "$TMP/C" --max-steps 75 --log-every 10 --resume auto
if [[ $RC -eq 0 ]] && same_state "$TMP/A/ckpt-00000075.h5" "$TMP/C/ckpt-00000075.h5"; then
  pass "resume_after_sigterm_is_bitwise_identical (stopped at $(basename "$ck"))"
else
  fail "resume_after_sigterm_is_bitwise_identical rc=$RC" "$(show)"
fi

# --- damaged newest file: fall back to the previous one ------------------------------------------
for kind in truncated bitflip; do
  rm -rf "$TMP/F"; mkdir -p "$TMP/F"; cp "$TMP/A"/ckpt-*.h5 "$TMP/F/"
  bad="$TMP/F/ckpt-00000075.h5"
  if [[ $kind == truncated ]]; then
    truncate -s $(($(stat -c %s "$bad") / 2)) "$bad"  # half of it, whatever today's size
  else
    $PY - "$bad" <<'PY'
import sys, h5py
p = sys.argv[1]
with h5py.File(p, "r") as f:
    off = f["model/layer2.0.weight"].id.get_chunk_info(0).byte_offset
b = bytearray(open(p, "rb").read()); b[off + 777] ^= 0x04; open(p, "wb").write(b)
PY
  fi
  train "fallback_$kind" "$TMP/F" --max-steps 80 --resume auto
  if [[ $RC -eq 0 ]] && grep -q "warning: skipping damaged checkpoint: checkpoint $bad" "$ERR" &&
     grep -q "resume: $TMP/F/ckpt-00000060.h5" "$OUT"; then
    pass "fallback_past_${kind}_newest ($(grep -o 'ckpt-00000075.h5: [^(]*' "$ERR" | head -1))"
  else
    fail "fallback_past_${kind}_newest rc=$RC" "$(show)"
  fi
done

# --- incompatible file refused ------------------------------------------------------------------
cp "$TMP/A/ckpt-00000060.h5" "$TMP/v99.h5"
# A file as a future mnist_ddp would write it: version 99, with a valid file CRC (the user block's
# line over every later byte, as checkpoint.cpp and tools/ckpt_crc.py stamp it).
$PY -c "
import sys, h5py
sys.path.insert(0, '$REPO/tools')
from ckpt_crc import stamp_file_crc
f = h5py.File('$TMP/v99.h5', 'r+'); f.attrs.modify('format_version', 99); f.close()
stamp_file_crc('$TMP/v99.h5')"
train incompatible "$TMP/I" --resume "$TMP/v99.h5"
if [[ $RC -eq 2 ]] && grep -q "checkpoint $TMP/v99.h5: checkpoint format version 99" "$ERR" &&
   [[ $(grep -c "mnist_ddp: error" "$ERR") == 1 ]]; then
  pass "incompatible_version_refused"
else
  fail "incompatible_version_refused rc=$RC" "$(show)"
fi

# --- a checkpoint of version 0.1.0 (before the schema split) resumes ---------------------------
# tests/fixtures/checkpoint-0.1.0 (its README.md: how it was made). A: its step 3 resumed to step 6
# in one run; B: to step 4, then B's own step-4 file to step 6. A == B bit for bit shows the old
# file resumes as an uninterrupted continuation. A against 0.1.0's own step-6 file: equal up to
# the rounding of kernels that sum in another order (since issue 31 the AVX2 path computes layer1
# with its own kernels; other CPUs run other oneDNN kernels): every weight and buffer within 1e-6,
# every momentum within 2e-5 (seen: 6e-8 and 2.3e-6, AVX2 and AVX-512 paths alike), while the
# three steps move the state by more than 1e-3 (asserted): a resume that lost the momentum, the
# sampler position or a BN buffer is off by far more than the tolerance.
FX="$REPO/tests/fixtures/checkpoint-0.1.0"
python3 "$REPO/data/make_fixtures.py" "$TMP/fx" >/dev/null
V010=(--device cpu --data "$TMP/fx/valid" --epochs 3 --batch-size 8 --progress off)
v010() {  # v010 NAME DIR ARGS...
  local name="$1" dir="$2"; shift 2
  run "$name" 120 env ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell mpirun -np 2 "$BIN" "${V010[@]}" --checkpoint-dir "$dir" --log-dir "$dir/log" "$@"
}
v010 v010_a "$TMP/va" --resume "$FX/ckpt-00000003.h5" --max-steps 6
rc_a=$RC out_a="$(show)" kernels=$(grep -o "oneDNN kernels: [^)]*" "$OUT")
v010 v010_b4 "$TMP/vb" --resume "$FX/ckpt-00000003.h5" --max-steps 4
rc_b4=$RC
v010 v010_b6 "$TMP/vb" --resume "$TMP/vb/ckpt-00000004.h5" --max-steps 6
if [[ $rc_a -eq 0 && $rc_b4 -eq 0 && $RC -eq 0 ]] && grep -q "resume: step 3, epoch 1, sample 20" "$TMP/v010_a.out" &&
   same_state "$TMP/va/ckpt-00000006.h5" "$TMP/vb/ckpt-00000006.h5" &&
   ! same_state "$FX/ckpt-00000003.h5" "$TMP/va/ckpt-00000006.h5"; then
  if close_state "$TMP/va/ckpt-00000006.h5" "$FX/ckpt-00000006.h5" 1e-6 2e-5 &&
     ! close_state "$FX/ckpt-00000003.h5" "$FX/ckpt-00000006.h5" 1e-3 1e-3; then
    pass "checkpoint_of_0.1.0_resumes (A == B bit for bit; A == 0.1.0's own step 6 within 1e-6 / 2e-5, kernels '$kernels')"
  else
    fail "checkpoint_of_0.1.0: resumed step 6 is not within 1e-6 / 2e-5 of 0.1.0's own (kernels '$kernels')" \
      "$(h5diff -d 1e-6 "$TMP/va/ckpt-00000006.h5" "$FX/ckpt-00000006.h5" /model /model | tail -3)" \
      "$(h5diff -d 2e-5 "$TMP/va/ckpt-00000006.h5" "$FX/ckpt-00000006.h5" /optimizer /optimizer | tail -3)"
  fi
else
  fail "checkpoint_of_0.1.0 rc=$rc_a/$rc_b4/$RC" "$out_a" "$(show)"
fi

# --- another world size ---------------------------------------------------------------------------
run world4 300 mpirun -np 4 --oversubscribe "$BIN" "${COMMON[@]}" --checkpoint-dir "$TMP/W" --log-dir "$TMP/W/log" --resume "$TMP/B/ckpt-00000040.h5" --max-steps 45
if [[ $RC -eq 0 ]] && grep -q "checkpoint written by 2 ranks, now 4" "$OUT" && grep -q "done: 45 steps" "$OUT" &&
   grep -q "resumes at epoch 2, sample 1000 per rank" "$OUT"; then
  pass "resume_with_another_world_size (2 -> 4 ranks, position re-derived)"
else
  fail "resume_with_another_world_size rc=$RC" "$(show)"
fi

# --- unwritable directory: refused before training ---------------------------------------------
mkdir -p "$TMP/ro"
if mount -t tmpfs -o ro,size=64k tmpfs "$TMP/ro" 2>/dev/null; then
  MOUNTS+=("$TMP/ro"); rodir="$TMP/ro/ckpt"; how="read-only tmpfs"
else
  touch "$TMP/ro/file"; rodir="$TMP/ro/file/ckpt"; how="path under a file"
fi
train readonly "$rodir" --max-steps 10 --log-dir "$TMP/ro_log"
if [[ $RC -eq 2 ]] && grep -q -- "--checkpoint-dir $rodir" "$ERR" && ! grep -q "^training:" "$OUT"; then
  pass "unwritable_checkpoint_dir_refused_before_training ($how)"
else
  fail "unwritable_checkpoint_dir rc=$RC ($how)" "$(show)"
fi

# --- full disk: the previous checkpoint survives ------------------------------------------------
mkdir -p "$TMP/full"
# Room for one checkpoint and a half (sized from a real one): the second write runs out of space.
full_kib=$(($(stat -c %s "$TMP/A/ckpt-00000075.h5") * 3 / 2 / 1024 + 1))
if mount -t tmpfs -o "size=${full_kib}k" tmpfs "$TMP/full" 2>/dev/null; then
  MOUNTS+=("$TMP/full"); how="${full_kib} KiB tmpfs (1.5 checkpoints)"
  train fulldisk "$TMP/full" --max-steps 40 --checkpoint-every 10 --log-dir "$TMP/full_log"
else
  how="ENOSPC injection"
  train fulldisk0 "$TMP/full" --max-steps 10 --log-dir "$TMP/full_log"
  MNIST_DDP_TEST_FAIL_CHECKPOINT=enospc train fulldisk "$TMP/full" --max-steps 20 --resume auto --log-dir "$TMP/full_log"
fi
fd_rc=$RC; fd_err="$ERR"
train fulldisk_check "$TMP/full_check" --resume "$TMP/full/ckpt-00000010.h5" --max-steps 10 --log-dir "$TMP/full_log2"
# The message says what happened and what to do first, in the user's words, the library's after.
if [[ $fd_rc -eq 2 ]] && grep -q "not written: the disk is full; free space there, or pass another --checkpoint-dir. The checkpoints already in .* are untouched. (Detail: .*No space left on device" "$fd_err" &&
   [[ $RC -eq 0 ]] && ! ls -A "$TMP/full" | grep -q tmp; then
  pass "full_disk_keeps_previous_checkpoint ($how; ckpt-00000010.h5 still loads; $(grep -o 'not written: [^.]*' "$fd_err" | head -1))"
else
  fail "full_disk_keeps_previous_checkpoint fd_rc=$fd_rc rc=$RC ($how)" "$(tail -5 "$fd_err")" "$(ls -la "$TMP/full")"
fi

# --- kill -9 of one rank ends the job; older checkpoints intact -----------------------------------
(cd "$TMP" && timeout 300 mpirun -np 2 "$BIN" "${COMMON[@]}" --checkpoint-every 10 --checkpoint-dir "$TMP/K" --log-dir "$TMP/K/log" >"$TMP/k.out" 2>&1; echo $? >"$TMP/k.rc") &
for _ in $(seq 200); do [[ $(ls "$TMP/K"/ckpt-*.h5 2>/dev/null | wc -l) -ge 2 ]] && break; sleep 0.1; done
pid=$(ps -eo pid=,args= | grep -F -- "--checkpoint-dir $TMP/K" | grep -v -e grep -e mpirun | awk 'NR==2{print $1}')
kill -KILL "$pid"
t0=$(date +%s.%N); wait; secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
sleep 1
ok=1
for f in "$TMP/K"/ckpt-*.h5; do
  step=$((10#$(basename "$f" .h5 | cut -d- -f2)))
  run "verify_$step" 120 "$BIN" --device cpu --data "$DATA" --checkpoint-dir "$TMP/Kv" --log-dir "$TMP/Kv/log" --progress off --resume "$f" --max-steps "$step"
  [[ $RC -eq 0 ]] || ok=0
done
if [[ "$(cat "$TMP/k.rc")" != 0 && $ok == 1 && $(alive "$TMP/K" | wc -l) == 0 ]] && awk -v s="$secs" 'BEGIN { exit !(s < 30) }'; then
  pass "kill_9_one_rank_ends_job_in_${secs%??????}s_checkpoints_intact ($(ls "$TMP/K" | grep -c ckpt) valid)"
else
  fail "kill_9_one_rank rc=$(cat "$TMP/k.rc") secs=$secs ok=$ok" "$(tail -10 "$TMP/k.out")"
fi

# --- a second signal stops at once, touching no checkpoint -----------------------------------
# --keep 1000: the first signal's own stop checkpoint may finish before the second signal lands, and
# rotation would then delete the oldest file by design; this case is about damage, not rotation.
(cd "$TMP" && timeout 300 "$BIN" "${COMMON[@]}" --checkpoint-every 10 --keep 1000 --checkpoint-dir "$TMP/D" --log-dir "$TMP/D/log" >"$TMP/d.out" 2>&1; echo $? >"$TMP/d.rc") &
for _ in $(seq 200); do [[ $(ls "$TMP/D"/ckpt-*.h5 2>/dev/null | wc -l) -ge 1 ]] && break; sleep 0.1; done
sleep 0.3
before=$(cd "$TMP/D" && md5sum ckpt-*.h5)
# mnist_ddp itself (timeout, started first with the same arguments, would forward both at once).
pid=$(ps -eo pid=,comm=,args= | grep -F -- "--checkpoint-dir $TMP/D" | awk '$2 == "mnist_ddp" { print $1; exit }')
# Two signals sent back to back can merge into one pending SIGINT (standard signals do not queue):
# send the second only once the first has left the pending set, i.e. reached the handler.
kill -INT "$pid"
for _ in $(seq 500); do
  awk '/^(SigPnd|ShdPnd):/ { if ($2 !~ /^0+$/) p = 1 } END { exit p }' "/proc/$pid/status" 2>/dev/null && break
done
kill -INT "$pid"
wait
after=$(cd "$TMP/D" && md5sum $(echo "$before" | awk '{print $2}'))
if [[ "$(cat "$TMP/d.rc")" == 130 && "$before" == "$after" ]]; then
  pass "second_ctrl_c_exits_130_existing_checkpoints_unchanged"
else
  fail "second_ctrl_c rc=$(cat "$TMP/d.rc")" "$before" "$after" "$(tail -5 "$TMP/d.out")"
fi

# --- export to PyTorch reproduces mnist_ddp's own evaluation ---------------------------------
# This and the docs snippet run Python only: the sanitizers' run leaves both to make test.
if [[ -n "${MNIST_DDP_SANITIZER:-}" ]]; then
  echo "skip - export_to_pytorch, docs_snippet (Python only, no mnist_ddp launch: the $MNIST_DDP_SANITIZER run leaves them to make test)"
elif py_has $PY torch h5py; then
  ours=$($PY -c "import json; print([json.loads(l) for l in open('$TMP/A/log/metrics.jsonl') if '\"done\"' in l][-1]['top1'])")
  theirs=$($PY "$REPO/tools/export_to_pytorch.py" "$TMP/A/ckpt-00000075.h5" --eval "$DATA" -o "$TMP/convnet.pt" |
           $PY -c "import json,sys; print(json.load(sys.stdin)['top1'])")
  if [[ -s "$TMP/convnet.pt" ]] && awk -v a="$ours" -v b="$theirs" 'BEGIN { exit !((a - b) ^ 2 <= 0.0001 ^ 2) }'; then
    pass "export_to_pytorch_same_accuracy (mnist_ddp $ours, PyTorch $theirs)"
  else
    fail "export_to_pytorch_same_accuracy ours=$ours theirs=$theirs"
  fi
else
  echo "skip - export_to_pytorch (python3-torch/python3-h5py not installed)"
fi

# --- the checkpoint page's snippet, as written there, is working inference -------------------------
# Its text is taken from docs/checkpoints.md (not a copy), pointed at a real checkpoint, and given the raw
# uint8 test images: its accuracy must equal mnist_ddp's own evaluation of that checkpoint within
# 0.1 point, with the transform read from the checkpoint alone.
if [[ -z "${MNIST_DDP_SANITIZER:-}" ]] && py_has $PY torch h5py; then
  awk '/^```python/{f=1;next} /^```/{if(f)exit} f' "$REPO/docs/checkpoints.md" |
    sed "s|checkpoints/ckpt-00000600.h5|$TMP/A/ckpt-00000075.h5|" > "$TMP/snippet.py"
  cat >> "$TMP/snippet.py" <<PY
import sys
sys.path.insert(0, "$REPO/tools")
from convnet_torch import find, read_idx
pixels = read_idx(find("$DATA", "t10k-images-idx3-ubyte"))
labels = torch.as_tensor(read_idx(find("$DATA", "t10k-labels-idx1-ubyte")).astype("int64"))
correct = sum(int((predict(pixels[b:b + 1000]) == labels[b:b + 1000]).sum()) for b in range(0, len(labels), 1000))
print("loaded", int(model.layer1[1].num_batches_tracked), "top1", correct / len(labels))
PY
  got=$($PY "$TMP/snippet.py" 2>"$TMP/snippet.err" | tail -1)
  theirs=$(awk '$1 == "loaded" && $3 == "top1" { print $4 }' <<<"$got")
  if [[ "$got" == "loaded 75 top1 "* ]] && awk -v a="$ours" -v b="$theirs" 'BEGIN { exit !((a - b) ^ 2 <= 0.001 ^ 2) }'; then
    pass "docs_snippet_is_working_inference (docs/checkpoints.md's own text: top-1 $theirs, mnist_ddp $ours)"
  else
    fail "docs_snippet_is_working_inference: '$got' vs mnist_ddp $ours" "$($PY "$TMP/snippet.py" 2>&1 | tail -3)"
  fi
fi
finish
