#!/usr/bin/env bash
# resume_matrix_test.sh — resume is bit-exact wherever it is claimed, not only under the default
# constant learning rate: cosine with warm-up, step decay across an epoch boundary, weight decay
# with Nesterov. Each: one uninterrupted run of 72 steps (checkpoint at 36) on the 6,000-image
# subset (30 steps an epoch: two epoch boundaries), and a run resumed from that checkpoint to 72;
# their final model and optimizer state must be identical (h5diff).
# A resume with other settings than the checkpoint's prints one warning naming each changed one.
source "$(dirname "$0")/lib.sh"
DATA="$(small_data)"
same_state() {
  h5diff -q "$1" "$2" /model /model >/dev/null && h5diff -q "$1" "$2" /optimizer /optimizer >/dev/null
}
base=(--device cpu --data "$DATA" --epochs 3 --max-steps 72 --progress off)
for c in "cosine_warmup:--lr-schedule cosine --warmup-steps 10" \
         "step_decay_across_epochs:--lr-schedule step --lr-step-size 1 --lr-gamma 0.5" \
         "weight_decay_nesterov:--weight-decay 0.0005 --nesterov --lr 0.02"; do
  name=${c%%:*}
  read -r -a extra <<<"${c#*:}"
  run "${name}_full" 300 mpirun -np 2 "$BIN" "${base[@]}" "${extra[@]}" --checkpoint-every 36 --log-dir "$TMP/$name-A" --checkpoint-dir "$TMP/$name-A"
  rc_full=$RC
  run "${name}_resumed" 300 mpirun -np 2 "$BIN" "${base[@]}" "${extra[@]}" --resume "$TMP/$name-A/ckpt-00000036.h5" --log-dir "$TMP/$name-B" --checkpoint-dir "$TMP/$name-B"
  a="$TMP/$name-A/ckpt-00000072.h5" b="$TMP/$name-B/ckpt-00000072.h5"
  if [[ $rc_full -eq 0 && $RC -eq 0 ]] && grep -q "^resume: step 36, epoch 2, sample 600" "$OUT" &&
     same_state "$a" "$b" && ! same_state "$TMP/$name-A/ckpt-00000060.h5" "$a" &&
     ! grep -q "setting(s) differ" "$ERR"; then
    pass "resume_is_bitwise_identical_${name} ($(grep -o 'lr [0-9.e-]*' "$OUT" | tail -1) at step 72)"
  else
    fail "resume_${name} rc=$rc_full/$RC" "$(show)"
  fi
done

# Other settings than the checkpoint's: one warning, naming each changed one (old -> new).
run changed 300 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --epochs 3 --max-steps 40 --progress off --lr-schedule cosine --warmup-steps 10 --batch-size 64 --lr 0.02 --resume "$TMP/cosine_warmup-A/ckpt-00000036.h5" --log-dir "$TMP/ch" --checkpoint-dir "$TMP/ch"
w=$(grep "mnist_ddp: warning: resume: .*setting(s) differ" "$ERR")
if [[ $RC -eq 0 && $(grep -c "setting(s) differ" "$ERR") == 1 ]] && grep -q "2 setting(s)" <<<"$w" &&
   grep -q -- "--batch-size 100 -> 64" <<<"$w" && grep -q -- "--lr 0.01 -> 0.02" <<<"$w"; then
  pass "resume_with_changed_settings_warns_naming_each (${w#*apply from this step on: })"
else
  fail "resume_with_changed_settings rc=$RC: '$w'" "$(show)"
fi
finish
