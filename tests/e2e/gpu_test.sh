#!/usr/bin/env bash
# gpu_test.sh — the GPU backend end to end. Skips only when `mnist_ddp --device cuda --print-env`
# says there is no GPU ("no usable GPU") or the binary has no CUDA backend, and only when
# MNIST_DDP_REQUIRE_GPU is not 1 (tests/mpi_env.sh sets it where nvidia-smi lists a GPU); any other
# probe failure is a failure. The cases, in order (GPU_TEST_CASES=name,name runs some of them; a
# case that reads another's files runs that one first):
#   epoch            1 epoch reaches the accuracy bar; PyTorch evaluates its checkpoint alike
#   worlds_of_one    --comm mpi and NCCL worlds of one under mpirun
#   trace            the timeline and the step-time split from CUDA events (graph replays included)
#   shared           2 ranks sharing the GPU (--comm mpi)
#   cpu_roundtrip    a checkpoint moving GPU -> CPU -> GPU (resumed, not restarted); --eval-only
#   resume_bitwise   a GPU -> GPU resume bitwise equal to the uninterrupted run
#   graphs_one_epoch CUDA graphs on == off bitwise over one epoch, "CUDA graphs: 1 captured"
#   graphs           2 epochs at batch 128 (two graphs, replays counted) == eager; the eager split
#   accumulate       --accumulate 3: three graphs == eager
#   capture_failure  a failing capture falls back to eager, bitwise equal to graphs off
#   overlap          bucketed overlap equal to one all-reduce (2 ranks --comm mpi; NCCL, world of 1)
#   amp              --amp fp16/bf16: 1 epoch each, top-1 within 1 point of FP32 (graphs_one_epoch's)
#   amp_resume       a resumed fp16 run keeps its loss scale
#   sync_bn_local_sgd  SyncBN on 2 ranks sharing the GPU; post-local SGD (world of one)
#   own_kernels      --gpu-kernels own: graphs == eager bitwise over one epoch (its kernel is
#                    deterministic), top-1 within 1 point of FP32 (graphs_one_epoch's), named in
#                    the kernels line
# Checkpoint comparisons need python3 with h5py and numpy.
source "$(dirname "$0")/lib.sh"
DATA="$REPO/data/dataset"
declare -A rc  # exit codes of runs compared with each other
REQUIRE="${MNIST_DDP_REQUIRE_GPU:-0}"

# --- probe: skip only for "no GPU here", never for a broken setup -------------------------------
run probe 60 "$BIN" --device cuda --print-env
if [[ $RC -ne 0 ]]; then
  why=$(cat "$ERR" "$OUT" | grep -m1 -o 'error: .*' | cut -c8-220)
  [[ -n "$why" ]] || why=$(cat "$ERR" "$OUT" | grep -v '^\s*$' | tail -n 1 | cut -c1-220)
  if [[ $REQUIRE != 1 ]] && grep -q "no usable GPU\|built without CUDA" "$OUT" "$ERR"; then
    echo "skip - gpu end-to-end tests ($why)"
    finish
  fi
  if [[ $REQUIRE == 1 ]]; then why="$why [MNIST_DDP_REQUIRE_GPU=1: a GPU is required here]"; fi
  fail "gpu_probe: --device cuda --print-env exit $RC: $why" "$(show)"
  finish
fi

# h5py/numpy: every bitwise comparison below needs them (python3 on PATH, else Debian's); say so
# once instead of N cryptic errors.
PY=python3
for p in python3 /usr/bin/python3; do
  if "$p" -c "import h5py, numpy" 2>/dev/null; then PY=$p; break; fi
done
if ! "$PY" -c "import h5py, numpy" 2>/dev/null; then
  fail "gpu_checkpoint_tools: no python3 here imports h5py and numpy (the checkpoint comparisons below will fail)" \
    "$("$PY" -c 'import h5py, numpy' 2>&1 | tail -n 1)"
fi

# ckpt_same A B: "identical" when the two checkpoints hold the same /model and /optimizer datasets,
# each bitwise equal (numpy.array_equal); else what differs, or why they could not be read.
ckpt_same() {
  "$PY" - "$1" "$2" <<'PY' 2>&1 | tail -n 1
import sys
import h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
def names(f):
    out = []
    f.visititems(lambda n, o: out.append(n) if isinstance(o, h5py.Dataset)
                 and n.split("/")[0] in ("model", "optimizer") else None)
    return out
na, nb = names(a), names(b)
bad = [n for n in na if n not in b or not np.array_equal(a[n][()], b[n][()])]
bad += [n + " (only in the second)" for n in nb if n not in a]
if not na:
    print("no /model or /optimizer datasets in " + sys.argv[1])
else:
    print("identical" if not bad else f"differ ({len(bad)} of {len(na)}): " + ", ".join(bad[:8]))
PY
}
# ckpt_attr FILE OBJECT ATTR: the integer attribute (e.g. ckpt_attr F optimizer step_count).
ckpt_attr() {
  "$PY" -c "import h5py, sys; print(int(h5py.File(sys.argv[1], 'r')[sys.argv[2]].attrs[sys.argv[3]]))" \
    "$1" "$2" "$3" 2>&1 | tail -n 1
}
# starts_with TEXT FILE: some line of FILE begins with TEXT (no regex: paths contain dots).
starts_with() { awk -v p="$1" 'index($0, p) == 1 { f = 1 } END { exit !f }' "$2"; }

bar=85
grep -q "^mnist (" "$DATA/DATASET" && bar=98
top1_of() { grep -o "done: .* test top-1 [0-9.]*%" "$1" | grep -o "[0-9.]*%$" | tr -d %; }

# --- the cases ------------------------------------------------------------------------------------
case_epoch() {
  run gpu_epoch 180 "$BIN" --device cuda --data "$DATA" --epochs 1 --progress off --log-dir "$TMP/g1" --checkpoint-dir "$TMP/g1"
  local top1 pt gpu_ckpt
  top1=$(top1_of "$OUT")
  if [[ $RC -eq 0 && -n "$top1" ]] && holds "$top1 >= $bar"; then
    pass "gpu_one_epoch top-1 ${top1}% ($(grep -o 'at [0-9]* img/s' "$OUT"), $(grep -oE 'cuda:[0-9]+ [^(]*' "$OUT" | head -1))"
  else
    fail "gpu_one_epoch rc=$RC top1=$top1 bar=$bar" "$(show)"
  fi
  # A GPU checkpoint is a complete model too: PyTorch, fed with the transform it records, evaluates
  # it to the GPU run's accuracy.
  gpu_ckpt=$(ls "$TMP"/g1/ckpt-*.h5 2>/dev/null | tail -n 1)
  pt=$("$PY" "$REPO/tools/export_to_pytorch.py" "$gpu_ckpt" --eval "$DATA" 2>&1 | grep -o '"top1": [0-9.]*' | grep -o '[0-9.]*$')
  if [[ -n "$pt" && -n "$top1" ]] && holds "(100 * $pt - $top1) ^ 2 <= 0.1 ^ 2"; then
    pass "gpu_checkpoint_in_pytorch_with_its_recorded_transform (PyTorch $pt, GPU run ${top1}%)"
  else
    fail "gpu_checkpoint_in_pytorch pt=$pt gpu=$top1 ($gpu_ckpt)"
  fi
}

# Worlds of one under mpirun: --comm mpi (used to segfault) and NCCL.
case_worlds_of_one() {
  run gpu_comm_mpi1 120 mpirun -np 1 "$BIN" --device cuda --comm mpi --data "$DATA" --epochs 1 --max-steps 50 --progress off --log-dir "$TMP/gm1" --checkpoint-dir "$TMP/gm1"
  if [[ $RC -eq 0 ]] && grep -q "done: 50 steps" "$OUT" && grep -q "CUDA graphs: 1 captured" "$OUT"; then
    pass "gpu_comm_mpi_world_of_one ($(grep -o 'CUDA graphs: .*' "$OUT"))"
  else
    fail "gpu_comm_mpi_world_of_one rc=$RC (want exit 0, 'done: 50 steps', 'CUDA graphs: 1 captured')" "$(show)"
  fi
  run gpu_nccl1 120 mpirun -np 1 "$BIN" --device cuda --comm nccl --data "$DATA" --epochs 1 --max-steps 50 --progress off --log-dir "$TMP/g2" --checkpoint-dir "$TMP/g2"
  if [[ $RC -eq 0 ]] && grep -q "done: 50 steps" "$OUT"; then pass "nccl_world_of_one"; else fail "nccl_world_of_one rc=$RC" "$(show)"; fi
}

# The timeline and the step-time split on the GPU: CUDA events, also inside graph replays. Step 1 is
# captured; steps 60..63 (traced) and 50 and 100 (sampled for the split) are replays: their spans
# come from the captured step's event nodes. check_trace.py holds what every trace must hold.
case_trace() {
  run gpu_trace 120 mpirun -np 1 "$BIN" --device cuda --comm nccl --data "$DATA" --epochs 1 --max-steps 120 --trace "$TMP/gpu_trace.json" --trace-steps 60:64 --progress off --log-dir "$TMP/gt" --checkpoint-dir "$TMP/gt"
  local got trc split
  got=$("$PY" "$REPO/tests/e2e/check_trace.py" "$TMP/gpu_trace.json" --ranks 1 --steps 60:64 --param-bytes 116136 2>&1)
  trc=$?
  split=$("$PY" -c "
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '\"step_time\"' in l]
p = [r[0][k + '_ms'] for k in ('data', 'forward', 'backward', 'optimizer')] if r else []
ok = len(r) == 1 and r[0]['steps'] == 2 and r[0]['timing'] == 'timed by CUDA events on every 50th step' and all(v > 0 for v in p) and r[0]['comm_ms'] >= 0
print('ok %.3f ms' % r[0]['total_ms'] if ok else 'bad %s' % r)" "$TMP/gt/metrics.jsonl" 2>&1)
  if [[ $RC -eq 0 && $trc -eq 0 && "$split" == ok* ]] && grep -q "CUDA graphs: 1 captured" "$OUT" &&
     grep -q "^step time epoch 1 (rank 0, per-phase medians over 2 steps, timed by CUDA events on every 50th step): " "$OUT"; then
    pass "gpu_trace_and_step_split_from_cuda_events ($got; ${split#ok })"
  else
    fail "gpu_trace rc=$RC check_trace=$trc split=$split" "$got" "$(show)"
  fi
}

# Two ranks sharing the GPU (host-staged MPI).
case_shared() {
  run gpu_shared 120 mpirun -np 2 "$BIN" --device cuda --comm mpi --data "$DATA" --epochs 1 --max-steps 50 --check-replicas 10 --progress off --log-dir "$TMP/g3" --checkpoint-dir "$TMP/g3"
  if [[ $RC -eq 0 ]] && grep -q "done: 50 steps" "$OUT"; then
    pass "two_ranks_share_the_gpu_with_comm_mpi (replicas checked every 10 steps)"
  else
    fail "two_ranks_share rc=$RC" "$(show)"
  fi
}

# GPU -> CPU -> GPU: each run resumes the previous one's checkpoint (worlds_of_one's NCCL step 50).
# The CPU steps change the numerics, so the result is not compared with an uninterrupted GPU run;
# what must hold: each run says it resumed that checkpoint at that step, runs on the device it was
# asked for, and the optimizer's step count carries through (60 after the CPU run, 70 at the end).
# Then --eval-only on the GPU of the CPU's step-60 checkpoint gives the CPU's own evaluation (FP32).
case_cpu_roundtrip() {
  need worlds_of_one
  local ck50="$TMP/g2/ckpt-00000050.h5" why="" sc60 sc70 cpu_out cpu_top1 gpu_top1
  run to_cpu 180 "$BIN" --device cpu --data "$DATA" --epochs 1 --max-steps 60 --resume "$ck50" --progress off --log-dir "$TMP/g4" --checkpoint-dir "$TMP/g4"
  [[ $RC -eq 0 ]] || why+=" cpu-run-exit-$RC"
  [[ -f "$ck50" ]] || why+=" no-$(basename "$ck50")-from-the-nccl-run"
  starts_with "resume: $ck50" "$OUT" || why+=" no-'resume: <gpu checkpoint>'"
  grep -q "^resume: step 50, epoch 1, " "$OUT" || why+=" no-'resume: step 50, epoch 1,'"
  grep -qE "^# +0 +0 .* cpu$" "$OUT" || why+=" not-on-the-cpu"
  sc60=$(ckpt_attr "$TMP/g4/ckpt-00000060.h5" optimizer step_count)
  [[ "$sc60" == 60 ]] || why+=" step_count@60=$sc60"
  cpu_out="$OUT"
  run back_to_gpu 120 "$BIN" --device cuda --data "$DATA" --epochs 1 --max-steps 70 --resume "$TMP/g4/ckpt-00000060.h5" --progress off --log-dir "$TMP/g5" --checkpoint-dir "$TMP/g5"
  [[ $RC -eq 0 ]] || why+=" gpu-run-exit-$RC"
  grep -q "^resume: step 60, " "$OUT" || why+=" no-'resume: step 60'"
  grep -qE "^# +0 +0 .* cuda:[0-9]+ " "$OUT" || why+=" not-on-the-gpu"
  grep -q "done: 70 steps" "$OUT" || why+=" no-'done: 70 steps'"
  sc70=$(ckpt_attr "$TMP/g5/ckpt-00000070.h5" optimizer step_count)
  [[ "$sc70" == 70 ]] || why+=" step_count@70=$sc70"
  if [[ -z "$why" ]]; then
    pass "checkpoint_gpu_to_cpu_to_gpu (resumed at 50 on the CPU, at 60 on the GPU; optimizer step_count 60 -> 70)"
  else
    fail "checkpoint_gpu_to_cpu_to_gpu:$why" "--- cpu run" "$(tail -n 12 "$cpu_out")" "--- back on the gpu" "$(show)"
  fi
  cpu_top1=$(grep -o "done: 60 steps, test top-1 [0-9.]*%" "$cpu_out" | grep -o "[0-9.]*%$" | tr -d %)
  run gpu_eval_only 120 "$BIN" --device cuda --tf32 off --data "$DATA" --eval-only --resume "$TMP/g4/ckpt-00000060.h5" --progress off --log-dir "$TMP/ge"
  gpu_top1=$(grep -o "^eval-only: .* test top-1 [0-9.]*%" "$OUT" | grep -o "[0-9.]*%$" | tr -d %)
  if [[ $RC -eq 0 && -n "$cpu_top1" && -n "$gpu_top1" ]] && holds "($gpu_top1 - $cpu_top1) ^ 2 <= 0.1 ^ 2"; then
    pass "gpu_eval_only_of_a_cpu_checkpoint (GPU ${gpu_top1}%, CPU ${cpu_top1}%)"
  else
    fail "gpu_eval_only rc=$RC gpu=$gpu_top1 cpu=$cpu_top1" "$(show)"
  fi
}

# GPU -> GPU resume is bitwise the uninterrupted run (FP32, deterministic algorithms).
case_resume_bitwise() {
  local rc_a same
  run resume_a 120 "$BIN" --device cuda --tf32 off --data "$DATA" --epochs 1 --max-steps 60 --checkpoint-every 30 --progress off --log-dir "$TMP/rA" --checkpoint-dir "$TMP/rA"
  rc_a=$RC
  run resume_b 120 "$BIN" --device cuda --tf32 off --data "$DATA" --epochs 1 --max-steps 60 --resume "$TMP/rA/ckpt-00000030.h5" --progress off --log-dir "$TMP/rB" --checkpoint-dir "$TMP/rB"
  same=$(ckpt_same "$TMP/rA/ckpt-00000060.h5" "$TMP/rB/ckpt-00000060.h5")
  if [[ $rc_a -eq 0 && $RC -eq 0 && "$same" == identical ]] && grep -q "^resume: step 30, " "$OUT" &&
     grep -q "done: 60 steps" "$OUT"; then
    pass "checkpoint_gpu_to_gpu_resume_bitwise (30 + 30 steps == 60 uninterrupted, model and optimizer)"
  else
    fail "checkpoint_gpu_to_gpu_resume_bitwise rc=$rc_a/$RC: $same" "$(tail -n 5 "$TMP/resume_a.out" "$TMP/resume_a.err")" "$(show)"
  fi
}

# CUDA graphs over one epoch at the default batch (one graph): replay == eager bitwise (FP32,
# deterministic algorithms). The graphs-on run's top-1 is the FP32 reference of case_amp.
case_graphs_one_epoch() {
  local g same line
  for g in on off; do
    run "graphs1_$g" 180 "$BIN" --device cuda --tf32 off --cuda-graphs "$g" --data "$DATA" --epochs 1 --progress off --log-dir "$TMP/g1e_$g" --checkpoint-dir "$TMP/g1e_$g"
    cp "$OUT" "$TMP/g1e_$g.out"
    rc[$g]=$RC
  done
  FP32_TOP1=$(top1_of "$TMP/g1e_on.out")
  echo "# fp32_top1 ${FP32_TOP1:-none}"  # read by tools/gpu-suite.sh first (its amp step)
  same=$(ckpt_same "$(ls "$TMP"/g1e_on/ckpt-*.h5 2>/dev/null | tail -n 1)" "$(ls "$TMP"/g1e_off/ckpt-*.h5 2>/dev/null | tail -n 1)")
  line=$(grep -o "CUDA graphs: [0-9]* captured (one per batch size), [0-9]* of [0-9]* steps replayed" "$TMP/g1e_on.out" | tail -n 1)
  if [[ ${rc[on]} -eq 0 && ${rc[off]} -eq 0 && "$same" == identical && "$line" == "CUDA graphs: 1 captured "* ]] &&
     [[ -n "$FP32_TOP1" ]] && holds "$FP32_TOP1 >= $bar"; then
    pass "cuda_graphs_one_epoch_replay_equals_eager ($line; FP32 top-1 ${FP32_TOP1}%)"
  else
    fail "cuda_graphs_one_epoch rc=${rc[on]}/${rc[off]}: $same; '${line:-no CUDA graphs line}' (want 1 captured); top-1 '$FP32_TOP1' (bar $bar)" \
      "$(grep -h 'CUDA graphs\|error\|done:' "$TMP"/g1e_*.out "$TMP"/graphs1_*.err)"
  fi
}

# CUDA graphs: replay == eager, and the replays really happened. A step captured once per batch size
# and replayed must train exactly as launching every kernel (deterministic cuDNN algorithms, FP32).
# Batch 128 leaves a partial last batch (two graphs); warm-up + cosine exercise the per-step lr the
# graph reads from device memory. Without --trace the split times eager steps only: graphs off has
# it, graph replays do not (their graphs carry no event nodes).
case_graphs() {
  local g same line cap rep tot
  for g in on off; do
    run "graphs_$g" 180 "$BIN" --device cuda --tf32 off --cuda-graphs "$g" --data "$DATA" --epochs 2 --batch-size 128 --lr-schedule cosine --warmup-steps 50 --progress off --log-dir "$TMP/cg_$g" --checkpoint-dir "$TMP/cg_$g"
    cp "$OUT" "$TMP/cg_$g.out"
    rc[$g]=$RC
  done
  same=$(ckpt_same "$(ls "$TMP"/cg_on/ckpt-*.h5 2>/dev/null | tail -n 1)" "$(ls "$TMP"/cg_off/ckpt-*.h5 2>/dev/null | tail -n 1)")
  line=$(grep -o "CUDA graphs: [0-9]* captured (one per batch size), [0-9]* of [0-9]* steps replayed" "$TMP/cg_on.out" | tail -n 1)
  read -r cap rep tot <<<"$(sed -E 's/^CUDA graphs: ([0-9]+) captured .*, ([0-9]+) of ([0-9]+) steps replayed$/\1 \2 \3/' <<<"$line")"
  if [[ ${rc[on]} -eq 0 && ${rc[off]} -eq 0 && "$same" == identical && "$cap" == 2 ]] &&
     ((rep > 0 && rep >= tot - 4)); then
    pass "cuda_graphs_replay_equals_eager ($line)"
  else
    fail "cuda_graphs_replay_equals_eager rc=${rc[on]}/${rc[off]}: $same; '${line:-no CUDA graphs line}' (want 2 captured, replays > 0 and >= steps - 4)" \
      "$(grep -h 'CUDA graphs\|error' "$TMP"/cg_*.out "$TMP"/graphs_*.err)"
  fi
  if grep -q "^step time epoch 1 (rank 0, per-phase medians over 9 steps, timed by CUDA events on every 50th step): " "$TMP/cg_off.out" &&
     ! grep -q "^step time" "$TMP/cg_on.out"; then
    pass "gpu_step_split_of_eager_steps_without_trace"
  else
    fail "gpu_step_split_without_trace (want a split over 9 steps with graphs off, none with graphs on)" "$(grep -h '^step time' "$TMP"/cg_*.out)"
  fi
}

# --accumulate 3: the first, middle and last micro-batch are three graphs; replay == eager.
case_accumulate() {
  local g same line
  for g in on off; do
    run "acc_graphs_$g" 180 "$BIN" --device cuda --tf32 off --cuda-graphs "$g" --accumulate 3 --data "$DATA" --epochs 1 --max-steps 100 --progress off --log-dir "$TMP/acc_$g" --checkpoint-dir "$TMP/acc_$g"
    cp "$OUT" "$TMP/acc_$g.out"
    rc[$g]=$RC
  done
  same=$(ckpt_same "$TMP/acc_on/ckpt-00000100.h5" "$TMP/acc_off/ckpt-00000100.h5")
  line=$(grep -o "CUDA graphs: [0-9]* captured .*, [0-9]* of [0-9]* micro-batches replayed" "$TMP/acc_on.out" | tail -n 1)
  if [[ ${rc[on]} -eq 0 && ${rc[off]} -eq 0 && "$same" == identical && "$line" == "CUDA graphs: 3 captured "*", 294 of 300 micro-batches replayed" ]]; then
    pass "accumulate_three_graphs_replay_equals_eager ($line)"
  else
    fail "accumulate_three_graphs rc=${rc[on]}/${rc[off]}: $same; '${line:-no CUDA graphs line}' (want 3 captured, 294 of 300 replayed)" \
      "$(grep -h 'CUDA graphs\|error' "$TMP"/acc_*.out)"
  fi
}

# A capture that fails falls back to eager steps, bitwise equal to --cuda-graphs off.
case_capture_failure() {
  local rc_fail fail_out same
  run cf_fail 120 "$BIN" --device cuda --tf32 off --debug-fail-capture --data "$DATA" --epochs 1 --max-steps 120 --batch-size 128 --progress off --log-dir "$TMP/cf_fail" --checkpoint-dir "$TMP/cf_fail"
  rc_fail=$RC fail_out="$OUT"
  run cf_off 120 "$BIN" --device cuda --tf32 off --cuda-graphs off --data "$DATA" --epochs 1 --max-steps 120 --batch-size 128 --progress off --log-dir "$TMP/cf_off" --checkpoint-dir "$TMP/cf_off"
  same=$(ckpt_same "$TMP/cf_fail/ckpt-00000120.h5" "$TMP/cf_off/ckpt-00000120.h5")
  if [[ $rc_fail -eq 0 && $RC -eq 0 && "$same" == identical ]] && grep -q "CUDA graphs: capture failed" "$fail_out" "${fail_out%.out}.err" &&
     grep -q "CUDA graphs: 0 captured" "$fail_out" && grep -q "done: 120 steps" "$fail_out"; then
    pass "cuda_graph_capture_failure_falls_back_to_eager_bitwise ($(grep -o 'CUDA graphs: 0 captured.*' "$fail_out"))"
  else
    fail "cuda_graph_capture_failure_falls_back rc=$rc_fail/$RC: $same (want 'CUDA graphs: capture failed', 'CUDA graphs: 0 captured')" \
      "$(grep -h 'CUDA graphs\|error\|done:' "$fail_out" "$TMP/cf_fail.err" "$OUT" "$ERR")"
  fi
}

# Bucketed overlap == one all-reduce. Two ranks sharing the GPU (host-staged MPI: NCCL needs one GPU
# per rank and there is one GPU): the bucketed reducer against --no-overlap, bitwise (a sum of two
# values has one rounding). Then NCCL's stream, world of one: the path (events, NCCL stream, join
# before SGD) runs and trains bitwise like one all-reduce; with one rank nothing overlaps across ranks.
case_overlap() {
  local o flag same
  for o in overlap no_overlap; do
    flag=(); [[ $o == no_overlap ]] && flag=(--no-overlap)
    run "ov2_$o" 180 mpirun -np 2 "$BIN" --device cuda --comm mpi --tf32 off "${flag[@]}" --data "$DATA" --epochs 1 --max-steps 200 --check-replicas 100 --progress off --log-dir "$TMP/ov2_$o" --checkpoint-dir "$TMP/ov2_$o"
    rc[$o]=$RC
  done
  same=$(ckpt_same "$TMP/ov2_overlap/ckpt-00000200.h5" "$TMP/ov2_no_overlap/ckpt-00000200.h5")
  if [[ ${rc[overlap]} -eq 0 && ${rc[no_overlap]} -eq 0 && "$same" == identical ]] &&
     grep -q "^comm epoch 1: 3 buckets (overlapped with backward)" "$TMP/ov2_overlap.out" &&
     grep -q "^comm epoch 1: 3 buckets (--no-overlap" "$TMP/ov2_no_overlap.out"; then
    pass "gpu_bucketed_overlap_equals_one_allreduce_two_ranks_comm_mpi ($(grep -o '^comm epoch 1: [^,]*' "$TMP/ov2_overlap.out"))"
  else
    fail "gpu_bucketed_overlap_two_ranks_comm_mpi rc=${rc[overlap]}/${rc[no_overlap]}: $same (want 'comm epoch 1: 3 buckets (overlapped with backward)' / '(--no-overlap')" \
      "$(grep -h 'comm epoch\|error' "$TMP"/ov2_*.out "$TMP"/ov2_*.err)"
  fi
  for o in overlap no_overlap; do
    flag=(); [[ $o == no_overlap ]] && flag=(--no-overlap)
    run "ov1_$o" 120 "$BIN" --device cuda --tf32 off "${flag[@]}" --data "$DATA" --epochs 1 --max-steps 200 --progress off --log-dir "$TMP/ov1_$o" --checkpoint-dir "$TMP/ov1_$o"
    rc[$o]=$RC
  done
  same=$(ckpt_same "$TMP/ov1_overlap/ckpt-00000200.h5" "$TMP/ov1_no_overlap/ckpt-00000200.h5")
  if [[ ${rc[overlap]} -eq 0 && ${rc[no_overlap]} -eq 0 && "$same" == identical ]] &&
     grep -q "3 buckets (overlapped with backward) on the NCCL stream" "$TMP/ov1_overlap.out"; then
    pass "gpu_nccl_stream_reducer_world_of_one (world of one: checks the NCCL-stream path runs and equals one all-reduce, not overlap across ranks)"
  else
    fail "gpu_nccl_stream_reducer_world_of_one rc=${rc[overlap]}/${rc[no_overlap]}: $same" "$(grep -h 'comm epoch\|error' "$TMP"/ov1_*.out "$TMP"/ov1_*.err)"
  fi
}

# Mixed precision: one epoch in fp16 (dynamic loss scale) and in bf16 reaches the accuracy bar and
# lands within 1 point of the same epoch in FP32 (graphs_one_epoch's graphs-on run: same seed, data
# and graphs; GPU_TEST_FP32_TOP1 passes that figure from an earlier run of this script, as
# tools/gpu-suite.sh first does); fp16 logs its scale and checkpoints it in /amp.
case_amp() {
  if [[ -n "${GPU_TEST_FP32_TOP1+set}" ]]; then
    FP32_TOP1=$GPU_TEST_FP32_TOP1  # given (empty: the earlier run had none; said below)
  else
    need graphs_one_epoch
  fi
  local m top1 extra
  for m in fp16 bf16; do
    run "amp_$m" 180 "$BIN" --device cuda --amp "$m" --data "$DATA" --epochs 1 --log-every 100 --progress off --log-dir "$TMP/amp_$m" --checkpoint-dir "$TMP/amp_$m"
    top1=$(top1_of "$OUT")
    extra=ok
    if [[ $m == fp16 ]]; then
      grep -q "loss-scale [0-9]* skipped [0-9]*" "$OUT" || extra="no loss-scale in the progress lines"
      "$PY" -c "import glob,h5py,sys; f=h5py.File(sorted(glob.glob(sys.argv[1]+'/ckpt-*.h5'))[-1], 'r'); a=f['amp'].attrs; sys.exit(0 if a['loss_scale']>0 else 1)" "$TMP/amp_$m" 2>/dev/null || extra="no /amp loss_scale in the checkpoint"
    fi
    if [[ $RC -eq 0 && -n "$top1" && -n "$FP32_TOP1" && $extra == ok ]] && holds "$top1 >= $bar" &&
       holds "($top1 - $FP32_TOP1) ^ 2 <= 1"; then
      pass "amp_${m}_one_epoch top-1 ${top1}% vs FP32 ${FP32_TOP1}% ($(grep -o 'at [0-9]* img/s' "$OUT"); $(grep -o 'loss-scale [0-9]* skipped [0-9]*' "$OUT" | tail -1))"
    else
      fail "amp_$m rc=$RC top1=$top1 fp32=${FP32_TOP1:-none (no FP32 reference: graphs_one_epoch gave none)} (want within 1 point, and >= $bar) ($extra)" "$(show)"
    fi
  done
}

case_amp_resume() {
  need amp
  run amp_resume 180 "$BIN" --device cuda --amp fp16 --data "$DATA" --epochs 2 --max-steps 700 --log-every 50 --resume auto --progress off --log-dir "$TMP/amp_fp16" --checkpoint-dir "$TMP/amp_fp16"
  if [[ $RC -eq 0 ]] && grep -q "^resume: step " "$OUT" && grep -q "done: 700 steps" "$OUT" && ! grep -q "no loss scale" "$OUT"; then
    pass "amp_fp16_resume_keeps_the_scale ($(grep -m1 -o '^resume: step [0-9]*' "$OUT"))"
  else
    fail "amp_fp16_resume rc=$RC" "$(show)"
  fi
}

# SyncBN (two ranks sharing the GPU; the BN exchange goes through the host) and post-local SGD (NCCL
# groups need one GPU per rank: a world of one here, so nothing is actually averaged).
case_sync_bn_local_sgd() {
  run gpu_sync_bn 120 mpirun -np 2 "$BIN" --device cuda --comm mpi --sync-bn --data "$DATA" --epochs 1 --max-steps 60 --check-replicas 20 --progress off --log-dir "$TMP/sbn" --checkpoint-dir "$TMP/sbn"
  if [[ $RC -eq 0 ]] && grep -q "done: 60 steps" "$OUT"; then pass "gpu_sync_bn_two_ranks_share_the_gpu"; else fail "gpu_sync_bn rc=$RC" "$(show)"; fi
  run gpu_local_sgd 120 "$BIN" --device cuda --local-sgd-start 20 --local-sgd-period 4 --data "$DATA" --epochs 1 --max-steps 60 --progress off --log-dir "$TMP/lsgd" --checkpoint-dir "$TMP/lsgd"
  if [[ $RC -eq 0 ]] && grep -q "done: 60 steps" "$OUT" && grep -q "CUDA graphs off: post-local SGD" "$OUT"; then
    pass "gpu_post_local_sgd_world_of_one (runs on an NCCL group split from the world and turns graphs off; one rank averages nothing)"
  else
    fail "gpu_local_sgd rc=$RC" "$(show)"
  fi
}

# --gpu-kernels own (layer2's weight gradient on TF32 tensor cores, wgrad_tf32.cuh): split over the
# batch with the partials added in a fixed order, so a graph replay trains bitwise like eager
# steps; TF32 rounding of its inputs moves top-1 no more than --amp's 16 bits may (1 point of FP32).
case_own_kernels() {
  if [[ -n "${GPU_TEST_FP32_TOP1+set}" ]]; then
    FP32_TOP1=$GPU_TEST_FP32_TOP1
  else
    need graphs_one_epoch
  fi
  local g same top1 kernels
  for g in on off; do
    run "ownk_$g" 180 "$BIN" --device cuda --gpu-kernels own --cuda-graphs "$g" --data "$DATA" --epochs 1 --progress off --log-dir "$TMP/own_$g" --checkpoint-dir "$TMP/own_$g"
    cp "$OUT" "$TMP/own_$g.out"
    rc[own_$g]=$RC
  done
  top1=$(top1_of "$TMP/own_on.out")
  kernels=$(grep -c "own TF32 layer2 weight gradient" "$TMP/own_on.out")
  same=$(ckpt_same "$(ls "$TMP"/own_on/ckpt-*.h5 2>/dev/null | tail -n 1)" "$(ls "$TMP"/own_off/ckpt-*.h5 2>/dev/null | tail -n 1)")
  if [[ ${rc[own_on]} -eq 0 && ${rc[own_off]} -eq 0 && "$same" == identical && $kernels -ge 1 ]] &&
     [[ -n "$top1" && -n "$FP32_TOP1" ]] && holds "$top1 >= $bar" && holds "($top1 - $FP32_TOP1) ^ 2 <= 1"; then
    pass "gpu_kernels_own_graphs_equal_eager_and_train (top-1 ${top1}% vs FP32 ${FP32_TOP1}%; $(grep -o 'at [0-9]* img/s' "$TMP/own_on.out" | tail -1))"
  else
    fail "gpu_kernels_own rc=${rc[own_on]}/${rc[own_off]}: $same; top-1 '${top1}' vs FP32 '${FP32_TOP1:-none}' (want within 1 point, >= $bar); kernels line named it: $kernels" \
      "$(grep -h 'kernels\|error\|done:' "$TMP"/own_*.out "$TMP"/ownk_*.err 2>/dev/null | head -20)"
  fi
}

# --- which cases run ---------------------------------------------------------------------------------
CASES=(epoch worlds_of_one trace shared cpu_roundtrip resume_bitwise graphs_one_epoch graphs accumulate
       capture_failure overlap amp amp_resume sync_bn_local_sgd own_kernels)
declare -A done_case
FP32_TOP1=""
# need NAME: runs case NAME unless it ran already (a case that reads another's files).
need() {
  [[ -n "${done_case[$1]:-}" ]] && return 0
  done_case[$1]=1
  "case_$1"
}
selected=("${CASES[@]}")
if [[ -n "${GPU_TEST_CASES:-}" ]]; then
  IFS=', ' read -r -a selected <<<"$GPU_TEST_CASES"
fi
for c in "${selected[@]}"; do
  if [[ " ${CASES[*]} " == *" $c "* ]]; then
    need "$c"
  else
    fail "gpu_test_case_$c: no such case (GPU_TEST_CASES takes: ${CASES[*]})"
  fi
done
finish
