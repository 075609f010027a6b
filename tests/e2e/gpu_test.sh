#!/usr/bin/env bash
# gpu_test.sh — the GPU backend end to end (skips with the reason without a GPU): 1 epoch on the
# GPU reaches the accuracy bar, NCCL with one rank, 2 ranks sharing the GPU with --comm mpi, and a
# checkpoint moving GPU -> CPU -> GPU, CUDA graph replay equal to eager, --amp fp16/bf16, and the
# bucketed NCCL overlap equal to one all-reduce, SyncBN and post-local SGD on the GPU.
source "$(dirname "$0")/lib.sh"
DATA="$REPO/data/dataset"
if ! "$BIN" --device cuda --print-env >/dev/null 2>&1; then
  echo "skip - gpu end-to-end tests ($("$BIN" --device cuda --print-env 2>&1 | grep -o 'error: .*' | cut -c8-90))"
  exit 0
fi
bar=85
grep -q "^mnist (" "$DATA/DATASET" && bar=98
run gpu_epoch 600 "$BIN" --device cuda --data "$DATA" --epochs 1 --progress off --log-dir "$TMP/g1" --checkpoint-dir "$TMP/g1"
top1=$(grep -o "done: .* test top-1 [0-9.]*%" "$OUT" | grep -o "[0-9.]*%$" | tr -d %)
if [[ $RC -eq 0 && -n "$top1" ]] && (( $(echo "$top1 >= $bar" | bc) )); then
  pass "gpu_one_epoch top-1 ${top1}% ($(grep -o 'at [0-9]* img/s' "$OUT"), $(grep -o 'device cuda:[^ ]* [^(]*' "$OUT" | head -1))"
else
  fail "gpu_one_epoch rc=$RC top1=$top1" "$(show)"
fi
run gpu_nccl1 300 mpirun -np 1 "$BIN" --device cuda --comm nccl --data "$DATA" --epochs 1 --max-steps 50 --progress off --log-dir "$TMP/g2" --checkpoint-dir "$TMP/g2"
[[ $RC -eq 0 ]] && pass "nccl_world_of_one" || fail "nccl_world_of_one rc=$RC" "$(show)"
run gpu_shared 300 mpirun -np 2 "$BIN" --device cuda --comm mpi --data "$DATA" --epochs 1 --max-steps 50 --check-replicas 10 --progress off --log-dir "$TMP/g3" --checkpoint-dir "$TMP/g3"
[[ $RC -eq 0 ]] && pass "two_ranks_share_the_gpu_with_comm_mpi" || fail "two_ranks_share rc=$RC" "$(show)"
run to_cpu 300 "$BIN" --device cpu --data "$DATA" --epochs 1 --max-steps 60 --resume "$TMP/g2/ckpt-00000050.h5" --progress off --log-dir "$TMP/g4" --checkpoint-dir "$TMP/g4"
run back_to_gpu 300 "$BIN" --device cuda --data "$DATA" --epochs 1 --max-steps 70 --resume "$TMP/g4/ckpt-00000060.h5" --progress off --log-dir "$TMP/g5" --checkpoint-dir "$TMP/g5"
if [[ $RC -eq 0 ]] && grep -q "done: 70 steps" "$OUT"; then pass "checkpoint_gpu_to_cpu_to_gpu"; else fail "checkpoint_cross_device rc=$RC" "$(show)"; fi
# CUDA graphs: a step captured once per batch size and replayed must train exactly as launching
# every kernel (deterministic cuDNN algorithms, FP32). Batch 128 leaves a partial last batch (two
# graphs); warm-up + cosine exercise the per-step lr the graph reads from device memory.
for g in on off; do
  run "graphs_$g" 300 "$BIN" --device cuda --tf32 off --cuda-graphs "$g" --data "$DATA" --epochs 2 --batch-size 128 --lr-schedule cosine --warmup-steps 50 --progress off --log-dir "$TMP/cg_$g" --checkpoint-dir "$TMP/cg_$g"
  cp "$OUT" "$TMP/cg_$g.out"
done
same=$(python3 - "$TMP/cg_on" "$TMP/cg_off" <<'PY' 2>&1
import glob, sys
import h5py, numpy as np
a, b = (h5py.File(sorted(glob.glob(d + "/ckpt-*.h5"))[-1], "r") for d in sys.argv[1:3])
bad = []
def visit(name, obj):
    if isinstance(obj, h5py.Dataset) and name.startswith(("model", "optimizer")):
        if not np.array_equal(obj[()], b[name][()]):
            bad.append(name)
a.visititems(visit)
print("identical" if not bad else "differ: " + ", ".join(bad))
PY
)
if grep -q "CUDA graphs: 2 captured" "$TMP/cg_on.out" && [[ "$same" == identical ]]; then
  pass "cuda_graphs_replay_equals_eager ($(grep -o 'CUDA graphs: .*' "$TMP/cg_on.out"))"
else
  fail "cuda_graphs_replay_equals_eager: $same" "$(grep -h 'CUDA graphs\|error' "$TMP"/cg_*.out)"
fi

# Mixed precision: one epoch in fp16 (dynamic loss scale) and in bf16 reaches the accuracy bar;
# fp16 logs its scale and checkpoints it in /amp, and a resumed fp16 run continues from it.
for m in fp16 bf16; do
  run "amp_$m" 600 "$BIN" --device cuda --amp "$m" --data "$DATA" --epochs 1 --log-every 100 --progress off --log-dir "$TMP/amp_$m" --checkpoint-dir "$TMP/amp_$m"
  top1=$(grep -o "done: .* test top-1 [0-9.]*%" "$OUT" | grep -o "[0-9.]*%$" | tr -d %)
  extra=ok
  if [[ $m == fp16 ]]; then
    grep -q "loss-scale [0-9]* skipped [0-9]*" "$OUT" || extra="no loss-scale in the progress lines"
    python3 -c "import glob,h5py,sys; f=h5py.File(sorted(glob.glob(sys.argv[1]+'/ckpt-*.h5'))[-1]); a=f['amp'].attrs; sys.exit(0 if a['loss_scale']>0 else 1)" "$TMP/amp_$m" 2>/dev/null || extra="no /amp loss_scale in the checkpoint"
  fi
  if [[ $RC -eq 0 && -n "$top1" && $extra == ok ]] && (( $(echo "$top1 >= $bar" | bc) )); then
    pass "amp_${m}_one_epoch top-1 ${top1}% ($(grep -o 'at [0-9]* img/s' "$OUT"); $(grep -o 'loss-scale [0-9]* skipped [0-9]*' "$OUT" | tail -1))"
  else
    fail "amp_$m rc=$RC top1=$top1 ($extra)" "$(show)"
  fi
done
run amp_resume 300 "$BIN" --device cuda --amp fp16 --data "$DATA" --epochs 2 --max-steps 700 --log-every 50 --resume auto --progress off --log-dir "$TMP/amp_fp16" --checkpoint-dir "$TMP/amp_fp16"
if [[ $RC -eq 0 ]] && grep -q "^resume: " "$OUT" && grep -q "done: 700 steps" "$OUT" && ! grep -q "no loss scale" "$OUT"; then
  pass "amp_fp16_resume_keeps_the_scale"
else
  fail "amp_fp16_resume rc=$RC" "$(show)"
fi

# The bucketed Reducer on NCCL's stream (default) trains bitwise like one all-reduce after backward.
for o in overlap no_overlap; do
  flag=(); [[ $o == no_overlap ]] && flag=(--no-overlap)
  run "ov_$o" 300 "$BIN" --device cuda --tf32 off "${flag[@]}" --data "$DATA" --epochs 1 --max-steps 200 --progress off --log-dir "$TMP/ov_$o" --checkpoint-dir "$TMP/ov_$o"
  cp "$OUT" "$TMP/ov_$o.out"
done
same=$(python3 - "$TMP/ov_overlap" "$TMP/ov_no_overlap" <<'PY' 2>&1
import sys
import h5py, numpy as np
a, b = (h5py.File(d + "/ckpt-00000200.h5", "r") for d in sys.argv[1:3])
bad = []
a.visititems(lambda n, o: bad.append(n) if isinstance(o, h5py.Dataset) and n.startswith(("model", "optimizer")) and not np.array_equal(o[()], b[n][()]) else None)
print("identical" if not bad else "differ: " + ", ".join(bad))
PY
)
if [[ "$same" == identical ]] &&
   grep -q "3 buckets (overlapped with backward) on the NCCL stream" "$TMP/ov_overlap.out"; then
  pass "gpu_bucketed_overlap_equals_one_allreduce ($(grep -o 'comm epoch 1: .*per rank' "$TMP/ov_overlap.out"))"
else
  fail "gpu_bucketed_overlap_equals_one_allreduce: $same" "$(grep -h 'comm epoch\|error' "$TMP"/ov_*.out)"
fi

# SyncBatchNorm with two ranks sharing the GPU (--comm mpi; the BN exchange goes through the host)
# and post-local SGD on NCCL groups (a world of one here): both train and say why graphs are off.
run gpu_sync_bn 300 mpirun -np 2 "$BIN" --device cuda --comm mpi --sync-bn --data "$DATA" --epochs 1 --max-steps 60 --check-replicas 20 --progress off --log-dir "$TMP/sbn" --checkpoint-dir "$TMP/sbn"
if [[ $RC -eq 0 ]] && grep -q "done: 60 steps" "$OUT"; then pass "gpu_sync_bn_two_ranks_share_the_gpu"; else fail "gpu_sync_bn rc=$RC" "$(show)"; fi
run gpu_local_sgd 300 "$BIN" --device cuda --local-sgd-start 20 --local-sgd-period 4 --data "$DATA" --epochs 1 --max-steps 60 --progress off --log-dir "$TMP/lsgd" --checkpoint-dir "$TMP/lsgd"
if [[ $RC -eq 0 ]] && grep -q "done: 60 steps" "$OUT" && grep -q "CUDA graphs off: post-local SGD" "$OUT"; then
  pass "gpu_post_local_sgd_on_nccl_groups"
else
  fail "gpu_local_sgd rc=$RC" "$(show)"
fi
