#!/usr/bin/env bash
# tests/aarch64/e2e_test.sh — the aarch64 build end to end, inside the arm64 root under qemu-user
# (tests/aarch64/run.sh runs it there): what the start-up line says runs (oneDNN's ISA and
# kernels, OpenBLAS's core); 2-rank training on the 6,000-image subset with a checkpoint; a stop
# and resume equal to the uninterrupted run bit for bit; the refusals as one clean exit. Debian
# 12's oneDNN 2.6 has no aarch64 JIT convolution for 128-bit SVE (it warns and names the fix), so
# training runs --cpu-kernels reference: im2col + OpenBLAS, the oracle backend.
source "$(dirname "$0")/../e2e/lib.sh"
DATA="$(small_data)"
# 50 images a rank a step and 10 steps: under qemu the reference kernels train ~30 images/s.
COMMON=(--device cpu --data "$DATA" --progress off --batch-size 50 --cpu-kernels reference)
same_state() { h5diff -q "$1" "$2" /model /model >/dev/null && h5diff -q "$1" "$2" /optimizer /optimizer >/dev/null; }

# 1. The start-up line on this CPU, with oneDNN's own kernels: what runs, and the warning.
run startup 300 "$BIN" --device cpu --data "$DATA" --dry-run --checkpoint-dir "$TMP/d" --log-dir "$TMP/d.l"
line=$(grep -m1 "^cpu: " "$OUT")
if [[ $RC -eq 0 ]] && [[ "$line" == "cpu: aarch64 (NEON"*"(oneDNN), OpenBLAS "*" kernels" ]] &&
   grep -q "device cpu (oneDNN kernels: " "$OUT"; then
  if grep -q "oneDNN has no JIT convolution for this CPU" "$ERR"; then
    pass "startup_names_what_runs ($line; oneDNN: $(grep -o 'oneDNN kernels: [^)]*' "$OUT"), with the warning)"
  else
    pass "startup_names_what_runs ($line; oneDNN: $(grep -o 'oneDNN kernels: [^)]*' "$OUT"))"
  fi
else
  fail "startup rc=$RC line='$line'" "$(show)"
fi

# 2. Training: 2 ranks, 10 steps, a checkpoint, a model far better than chance (10 classes: 10%;
#    the same run reaches ~60% on x86).
run train 900 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 10 --checkpoint-dir "$TMP/t" --log-dir "$TMP/t.l"
top1=$(grep -o "test top-1 [0-9.]*%" "$OUT" | tail -1 | sed "s/.* //; s/%//")
if [[ $RC -eq 0 && -f $TMP/t/ckpt-00000010.h5 ]] && grep -q "^done: 10 steps" "$OUT" && holds "${top1:-0} > 30"; then
  pass "training_2_ranks (10 steps, test top-1 ${top1}%, ${SECS%.*} s under qemu)"
else
  fail "train rc=$RC top1=$top1" "$(show)"
fi

# 3. Resume: 5 steps, then --resume auto to 10: the same bytes as the uninterrupted 10.
run first 900 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 5 --checkpoint-dir "$TMP/r" --log-dir "$TMP/r.l"
run resume 900 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 10 --resume auto --checkpoint-dir "$TMP/r" --log-dir "$TMP/r.l"
if [[ $RC -eq 0 && -f $TMP/r/ckpt-00000010.h5 ]] && grep -q "resume: step 5" "$OUT" &&
   same_state "$TMP/r/ckpt-00000010.h5" "$TMP/t/ckpt-00000010.h5"; then
  pass "resume_is_bitwise_identical (5 + 5 steps against 10, h5diff)"
else
  fail "resume rc=$RC" "$(show)"
fi

# 4. Refusals: one error line, exit 2, no flight dump (the race of tests/e2e/refusal_test.sh).
clean=0 first_bad=""
for i in 0 1 2; do
  case $((i % 3)) in 0) f=(--amp fp16) ;; 1) f=(--data "$TMP/no-such-data") ;; 2) f=(--resume "$TMP/no-such.h5") ;; esac
  run "refused$i" 300 mpirun -np 2 "$BIN" "${COMMON[@]}" --max-steps 1 --checkpoint-dir "$TMP/x$i" --log-dir "$TMP/x$i.l" "${f[@]}"
  if [[ $RC -eq 2 ]] && [[ $(grep -c "^mnist_ddp: error: " "$ERR") == 1 ]] && ! grep -q "flight recorder" "$ERR"; then
    clean=$((clean + 1))
  elif [[ -z "$first_bad" ]]; then
    first_bad="launch $i (${f[*]}): rc=$RC $(tr '\n' ' ' <"$ERR" | cut -c1-300)"
  fi
done
((clean == 3)) && pass "refusals_leave_cleanly (3 launches, three kinds)" || fail "refusals: $clean of 3 clean" "$first_bad"
finish
