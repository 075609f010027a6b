#!/usr/bin/env bash
# data_parallel_test.sh — the two promises of data parallelism, checked on the real binary rather
# than through accuracy: (1) in an epoch the ranks train on disjoint samples that together cover
# the training set (PyTorch DistributedSampler: padding repeats the head when the world does not
# divide it), read back from --debug-sample-log; (2) with --sync-bn, one step on 2 ranks x 50
# images equals one step on 1 rank x 100 images (the same union batch): the averaged gradient is
# the union-batch gradient, seen in the updated weights and the BN running statistics. Without
# --sync-bn the same comparison must differ (the check can fail).
source "$(dirname "$0")/lib.sh"
DATA="$(small_data)"  # the 6,000-image subset: an epoch is seconds, and one step needs no more
PY=/usr/bin/python3
COMMON=(--device cpu --data "$DATA" --progress off --epochs 1)

# split NP: one full epoch of the subset on NP ranks; every rank's file checked against the epoch.
split() {
  local np="$1"
  run "split$np" 300 mpirun -np "$np" --oversubscribe "$BIN" "${COMMON[@]}" --batch-size 100 \
    --debug-sample-log "$TMP/s$np" --checkpoint-dir "$TMP/s$np/ck" --log-dir "$TMP/s$np/log"
  if [[ $RC -ne 0 ]]; then fail "samples_disjoint_and_cover_the_epoch_np$np rc=$RC" "$(show)"; return; fi
  local verdict
  verdict=$($PY - "$TMP/s$np" "$np" <<'PYEOF'
import sys, collections
d, np_ = sys.argv[1], int(sys.argv[2])
n = 6000
per = [list(map(int, open(f"{d}/samples-epoch1-rank{r}.txt"))) for r in range(np_)]
each = -(-n // np_)  # ceil: DistributedSampler pads to a multiple of the world
counts = collections.Counter(i for p in per for i in p)
pad = each * np_ - n
problems = []
if any(len(p) != each for p in per): problems.append(f"per-rank counts {[len(p) for p in per]}, want {each}")
if set(counts) != set(range(n)): problems.append(f"{n - len(set(counts) & set(range(n)))} samples never visited")
dups = sum(c - 1 for c in counts.values())
if dups != pad: problems.append(f"{dups} repeated samples, want the {pad} of padding")
# Disjoint: with every rank's count right, every sample visited and exactly `pad` repeats, no
# sample is on two ranks except the padding's repeats of the head.
print("ok" if not problems else "; ".join(problems), f"{np_} ranks x {each} samples, {pad} padding")
PYEOF
)
  if [[ "$verdict" == ok* ]]; then
    pass "samples_disjoint_and_cover_the_epoch_np$np (${verdict#ok })"
  else
    fail "samples_disjoint_and_cover_the_epoch_np$np: $verdict"
  fi
}
split 3
split 7

# relerr W0 A B: max |A - B| of the parameters over the largest update of any parameter (a conv
# bias before BN has a ~0 gradient, so per-tensor scales would measure noise), and of each BN
# running statistic over its largest value; prints the worst and where.
relerr() {
  $PY - "$@" <<'PYEOF'
import sys, h5py, numpy as np
w0, a, b = (h5py.File(p, "r") for p in sys.argv[1:4])
names = []
a["model"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and o.dtype.kind == "f" else None)
get = lambda f, n: np.asarray(f["model"][n], dtype=np.float64)
params = [n for n in names if "running" not in n]
update = max(np.abs(get(a, n) - get(w0, n)).max() for n in params)
errs = [(np.abs(get(a, n) - get(b, n)).max() / update, n) for n in params]
errs += [(np.abs(get(a, n) - get(b, n)).max() / max(np.abs(get(a, n)).max(), 1e-12), n)
         for n in names if "running" in n]
e, n = max(errs)
print(f"{e:.3g} {n}")
PYEOF
}

# union KERNELS: one SGD step (momentum 0, lr 1 so the update is large) from the same initial
# weights: 2 ranks x 50 with --sync-bn against 1 rank x 100, and without --sync-bn as the control.
# Both are float32 evaluations of one step in other summation orders (and, with oneDNN, other
# convolution algorithms for batch 50 and 100): each within gamma_K of the exact step relative to
# the magnitudes summed (Higham's gamma_K = K u / (1 - K u), u = 2^-24, the worst case of any
# order, so of any kernel family), K = the longest float32 sum of the step: layer1's filter
# gradient over 100 x 28 x 28 pixels, plus the 2-term all-reduce. relerr scales by the largest
# update (or running statistic), so the bound on the difference is 2 gamma_K; the control (per-rank
# BN) must land well outside it.
UNION_TOL=$(awk 'BEGIN { k = 100 * 784 + 2; u = 2 ^ -24; printf "%.3g", 2 * k * u / (1 - k * u) }')
union() {
  local k="$1" tol="$UNION_TOL" name
  step1() {
    name="$1"; local np="$2"; shift 2
    run "$k-$name" 300 mpirun -np "$np" "$BIN" "${COMMON[@]}" --cpu-kernels "$k" --max-steps 1 \
      --momentum 0 --checkpoint-dir "$TMP/$k-$name" --log-dir "$TMP/$k-$name/log" "$@"
    [[ $RC -eq 0 ]] || fail "$k-$name rc=$RC" "$(show)"
  }
  step1 w0 1 --batch-size 100 --lr 0
  step1 union 1 --batch-size 100 --lr 1
  step1 syncbn 2 --batch-size 50 --lr 1 --sync-bn
  step1 localbn 2 --batch-size 50 --lr 1
  local ck=ckpt-00000001.h5 e_sync n_sync e_local n_local
  read -r e_sync n_sync <<<"$(relerr "$TMP/$k-w0/$ck" "$TMP/$k-union/$ck" "$TMP/$k-syncbn/$ck")"
  read -r e_local n_local <<<"$(relerr "$TMP/$k-w0/$ck" "$TMP/$k-union/$ck" "$TMP/$k-localbn/$ck")"
  if holds "$e_sync < $tol" && holds "$e_local > 5 * $tol"; then
    pass "sync_bn_step_equals_the_union_batch_step_$k (2x50 vs 1x100: max rel. error $e_sync < $tol at $n_sync; without --sync-bn $e_local at $n_local)"
  else
    fail "sync_bn_step_equals_the_union_batch_step_$k: sync-bn $e_sync ($n_sync, bound $tol), local BN $e_local ($n_local)"
  fi
}
union reference
union onednn
finish
