#!/usr/bin/env bash
# model_io_test.sh — a checkpoint is a complete model: --eval-only evaluates one (any world size)
# exactly as training did, says clearly when there is nothing to evaluate, and resuming on another
# dataset warns naming both (the checkpoint's /data record against this run's data).
source "$(dirname "$0")/lib.sh"
DATA="$REPO/data/dataset"
python3 "$REPO/data/make_fixtures.py" "$TMP/fx" || { fail "fixtures"; finish; }

run train 300 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --epochs 1 --max-steps 60 --progress off --log-dir "$TMP/t" --checkpoint-dir "$TMP/t"
trained=$(grep -o "done: 60 steps, test top-1 [0-9.]*% top-5 [0-9.]*% loss [0-9.]*" "$OUT" | sed 's/done: 60 steps, //')
[[ $RC -eq 0 && -n "$trained" ]] || fail "train rc=$RC" "$(show)"

# --eval-only on 1 and on 3 ranks: the numbers training printed for the same weights.
for np in 1 3; do
  run "eval_np$np" 120 mpirun -np "$np" --oversubscribe "$BIN" --device cpu --data "$DATA" --eval-only --resume "$TMP/t/ckpt-00000060.h5" --progress off --log-dir "$TMP/e$np"
  got=$(grep -o "test top-1 [0-9.]*% top-5 [0-9.]*% loss [0-9.]*" "$OUT")
  if [[ $RC -eq 0 && "$got" == "$trained" ]] && grep -q "^eval-only: step 60 checkpoint on .*(10000 test images, $np rank(s))" "$OUT" &&
     [[ -z "$(ls "$TMP/e$np"/ckpt-* 2>/dev/null)" ]] && grep -q '"event": *"eval_only"' "$TMP/e$np/metrics.jsonl"; then
    pass "eval_only_${np}_ranks_equals_training_evaluation ($got)"
  else
    fail "eval_only_${np}_ranks rc=$RC got '$got' want '$trained'" "$(show)"
  fi
done

# Nothing to evaluate: one clear error, exit 2, on every rank within seconds.
run eval_nothing 60 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --eval-only --progress off --log-dir "$TMP/n1"
if [[ $RC -eq 2 ]] && [[ $(grep -c "mnist_ddp: error: --eval-only evaluates a checkpoint: give it one with --resume PATH" "$ERR") == 1 ]]; then
  pass "eval_only_without_a_checkpoint_is_one_clear_error"
else
  fail "eval_only_without_a_checkpoint rc=$RC" "$(show)"
fi
mkdir -p "$TMP/empty"
run eval_auto_empty 60 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --eval-only --resume auto --checkpoint-dir "$TMP/empty" --progress off --log-dir "$TMP/n2"
if [[ $RC -eq 2 ]] && [[ $(grep -c "mnist_ddp: error: --eval-only --resume auto: no checkpoint in $TMP/empty to evaluate" "$ERR") == 1 ]]; then
  pass "eval_only_auto_with_no_checkpoint_is_one_clear_error"
else
  fail "eval_only_auto_with_no_checkpoint rc=$RC" "$(show)"
fi
run init_auto_empty 60 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --init-weights auto --checkpoint-dir "$TMP/empty" --progress off --log-dir "$TMP/n3"
if [[ $RC -eq 2 ]] && [[ $(grep -c "mnist_ddp: error: --init-weights auto: no checkpoint in $TMP/empty to start from; pass --checkpoint-dir DIR or --init-weights PATH" "$ERR") == 1 ]] &&
   ! grep -q -- "--eval-only" "$ERR"; then
  pass "init_weights_auto_with_no_checkpoint_names_init_weights"
else
  fail "init_weights_auto_with_no_checkpoint rc=$RC" "$(show)"
fi

# A checkpoint trained on the fixture data, resumed on Fashion-MNIST: a warning names both.
run fx_train 120 mpirun -np 2 "$BIN" --device cpu --data "$TMP/fx/valid" --batch-size 8 --eval-batch-size 8 --max-steps 2 --progress off --log-dir "$TMP/f" --checkpoint-dir "$TMP/f"
run fx_resume 120 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --resume auto --max-steps 4 --epochs 1 --progress off --log-dir "$TMP/f" --checkpoint-dir "$TMP/f"
if [[ $RC -eq 0 ]] && grep -q "mnist_ddp: warning: .*ckpt-00000002.h5 was trained on 'fixture.*' (labels crc32 [0-9a-f]*, [0-9]* training images); this run reads 'fashion-mnist.*' (labels crc32 [0-9a-f]*, 60000 training images)" "$ERR"; then
  pass "resume_on_another_dataset_warns_naming_both ($(grep -o "was trained on '[^']*'" "$ERR" | head -1))"
else
  fail "resume_on_another_dataset_warns rc=$RC" "$(show)"
fi

# --- the other direction: weights trained by PyTorch (ToTensor inputs, as the seeds do) ---------
PY=/usr/bin/python3
# PyTorch's own training is what the sanitizers' run needs least of: 30 steps there (PyTorch's
# accuracy after them is still what mnist_ddp must reproduce), 150 in make test.
PT_STEPS=150
[[ -n "${MNIST_DDP_SANITIZER:-}" ]] && PT_STEPS=30
if py_has $PY torch h5py; then
  run pt_train 300 $PY - "$REPO/tools" "$DATA" "$TMP/pt" "$PT_STEPS" <<'PYTRAIN'
import json, os, sys
import numpy as np, torch, torch.nn as nn
sys.path.insert(0, sys.argv[1])
from convnet_torch import ConvNet, find, keep_freed_memory, read_idx
keep_freed_memory()  # evaluating at a batch of 1,000: 7-9 s of page faults otherwise
data, out = sys.argv[2], sys.argv[3]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)
torch.set_num_threads(1)
def tensors(split):  # ToTensor: pixel / 255, no normalisation
    x = torch.tensor(read_idx(find(data, f"{split}-images-idx3-ubyte")), dtype=torch.float32) / 255
    y = torch.tensor(read_idx(find(data, f"{split}-labels-idx1-ubyte")).astype(np.int64))
    return x.unsqueeze(1), y
xtr, ytr = tensors("train")
xte, yte = tensors("t10k")
model, loss = ConvNet(), nn.CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
order = torch.randperm(len(ytr))
for step in range(int(sys.argv[4])):
    idx = order[step * 100:(step + 1) * 100]
    opt.zero_grad()
    loss(model(xtr[idx]), ytr[idx]).backward()
    opt.step()
model.eval()
with torch.no_grad():
    correct = sum(int((model(xte[b:b + 1000]).argmax(1) == yte[b:b + 1000]).sum()) for b in range(0, len(yte), 1000))
torch.save(model.state_dict(), f"{out}/convnet.pt")
bad = model.state_dict(); del bad["fc.bias"]; torch.save(bad, f"{out}/missing_key.pt")
bad = model.state_dict(); bad["fc.weight"] = torch.zeros(20, 1568); torch.save(bad, f"{out}/wrong_shape.pt")
bad = model.state_dict(); bad["layer1.0.weight"] = bad["layer1.0.weight"].double(); torch.save(bad, f"{out}/wrong_dtype.pt")
print(json.dumps({"top1": correct / len(yte)}))
PYTRAIN
  theirs=$(grep -o '"top1": [0-9.]*' "$OUT" | grep -o '[0-9.]*$')
  run pt_import 120 $PY "$REPO/tools/import_from_pytorch.py" "$TMP/pt/convnet.pt" -o "$TMP/pt/init.h5"
  import_rc=$RC
  run pt_eval 120 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --eval-only --resume "$TMP/pt/init.h5" --progress off --log-dir "$TMP/pe"
  ours=$(grep -o "^eval-only: .* test top-1 [0-9.]*%" "$OUT" | grep -o "[0-9.]*%$" | tr -d %)
  if [[ $import_rc -eq 0 && $RC -eq 0 && -n "$theirs" && -n "$ours" ]] &&
     awk -v a="$ours" -v b="$theirs" 'BEGIN { exit !((a - 100 * b) ^ 2 <= 0.1 ^ 2) }' &&
     grep -q "input: normalising as the model was trained, mean 0.0000 std 1.0000" "$OUT"; then
    pass "pytorch_weights_evaluate_to_pytorchs_accuracy (mnist_ddp --eval-only ${ours}%, PyTorch $(awk -v b="$theirs" 'BEGIN { printf "%.2f", 100 * b }')%, ToTensor transform from the file)"
  else
    fail "pytorch_weights_eval import=$import_rc rc=$RC ours=$ours theirs=$theirs" "$(show)"
  fi
  # --init-weights: a new run from those weights (step 0, fresh optimizer), recording their transform.
  run pt_init 300 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --init-weights "$TMP/pt/init.h5" --epochs 1 --max-steps 20 --progress off --log-dir "$TMP/pi" --checkpoint-dir "$TMP/pi"
  rec=$($PY -c "import h5py, sys; d = h5py.File(sys.argv[1], 'r')['data'].attrs; print(float(d['mean']), float(d['std']), int(h5py.File(sys.argv[1], 'r')['optimizer'].attrs['step_count']))" "$TMP/pi/ckpt-00000020.h5" 2>&1)
  if [[ $RC -eq 0 ]] && grep -q "^init-weights: .*init.h5 (the model of step 0, weights only)" "$OUT" &&
     grep -q "done: 20 steps" "$OUT" && [[ "$rec" == "0.0 1.0 20" ]]; then
    pass "init_weights_trains_from_step_0 (checkpoint records mean/std/steps: $rec)"
  else
    fail "init_weights rc=$RC rec='$rec'" "$(show)"
  fi
  # One weight changed by a valid HDF5 edit: the weights CRC (names and values) refuses the file.
  cp "$TMP/pt/init.h5" "$TMP/pt/edited.h5"
  $PY -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r+'); d = f['model/fc.bias']; v = d[()]; v[3] += 0.5; d[...] = v; f.close()" "$TMP/pt/edited.h5"
  run pt_edited 60 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --eval-only --resume "$TMP/pt/edited.h5" --progress off --log-dir "$TMP/pd"
  if [[ $RC -eq 2 ]] && [[ $(grep -c "mnist_ddp: error: weights .*edited.h5: file CRC32 mismatch" "$ERR") == 1 ]]; then
    pass "edited_weights_only_file_is_refused_by_its_crc"
  else
    fail "edited_weights_only rc=$RC" "$(show)"
  fi
  # A weights-only file cannot be resumed (nothing to continue): one clear error.
  run pt_resume 60 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --resume "$TMP/pt/init.h5" --progress off --log-dir "$TMP/pr" --checkpoint-dir "$TMP/pr"
  if [[ $RC -eq 2 ]] && [[ $(grep -c "mnist_ddp: error: .*init.h5: holds a model's weights only .*--init-weights" "$ERR") == 1 ]]; then
    pass "resume_of_weights_only_is_one_clear_error"
  else
    fail "resume_of_weights_only rc=$RC" "$(show)"
  fi
  # Wrong keys, shapes or dtypes: one error naming the key, nothing written.
  for c in "missing_key:fc.bias is missing" "wrong_shape:fc.weight has shape (20, 1568)" "wrong_dtype:layer1.0.weight has dtype float64"; do
    name=${c%%:*} want=${c#*:}
    run "imp_$name" 60 $PY "$REPO/tools/import_from_pytorch.py" "$TMP/pt/$name.pt" -o "$TMP/pt/$name.h5"
    if [[ $RC -ne 0 ]] && [[ $(grep -c "import_from_pytorch: .*key $want" "$ERR") == 1 ]] && [[ ! -e "$TMP/pt/$name.h5" ]] &&
       [[ -z "$(ls "$TMP/pt"/.import-* 2>/dev/null)" ]]; then
      pass "import_${name}_is_one_error_naming_the_key_nothing_written"
    else
      fail "import_$name rc=$RC" "$(show)"
    fi
  done
else
  echo "skip - pytorch interop (python3-torch/python3-h5py not installed)"
fi

# --- ONNX: the exported model takes raw pixels in [0, 1] (normalisation folded in) and, run by a
# real ONNX runtime (OpenCV's dnn module), gives the checkpoint's accuracy.
# Under the sanitizers (tests/run_sanitized.sh sets MNIST_DDP_SANITIZER) it is left to `make
# test`: it launches no mnist_ddp, only Python and OpenCV (10 s of CI's ASan suite).
if [[ -n "${MNIST_DDP_SANITIZER:-}" ]]; then
  echo "skip - onnx export (no mnist_ddp launch in it: the $MNIST_DDP_SANITIZER run leaves it to make test)"
elif py_has $PY torch h5py cv2; then
  run onnx_export 120 $PY "$REPO/tools/export_to_pytorch.py" "$TMP/t/ckpt-00000060.h5" --onnx "$TMP/model.onnx"
  export_rc=$RC
  run onnx_run 120 $PY - "$REPO/tools" "$DATA" "$TMP/model.onnx" <<'PYONNX'
import sys
import cv2, numpy as np
sys.path.insert(0, sys.argv[1])
from convnet_torch import find, read_idx
net = cv2.dnn.readNetFromONNX(sys.argv[3])
x = read_idx(find(sys.argv[2], "t10k-images-idx3-ubyte")).astype(np.float32) / 255  # raw pixels
y = read_idx(find(sys.argv[2], "t10k-labels-idx1-ubyte"))
correct = 0
for b in range(0, len(y), 1000):
    net.setInput(np.ascontiguousarray(x[b:b + 1000, None]))
    correct += int((net.forward().argmax(1) == y[b:b + 1000]).sum())
print(f"opencv {cv2.__version__} top1 {100 * correct / len(y):.2f}")
PYONNX
  onnx_top1=$(grep -o "top1 [0-9.]*" "$OUT" | grep -o "[0-9.]*$")
  want=$(sed -E 's/^test top-1 ([0-9.]+)%.*/\1/' <<<"$trained")
  if [[ $export_rc -eq 0 && $RC -eq 0 && -n "$onnx_top1" ]] && awk -v a="$onnx_top1" -v b="$want" 'BEGIN { exit !((a - b) ^ 2 <= 0.1 ^ 2) }'; then
    pass "onnx_export_runs_in_opencv_at_the_checkpoints_accuracy ($(grep -o "opencv .*" "$OUT")%, mnist_ddp ${want}%)"
  else
    fail "onnx_export export=$export_rc rc=$RC onnx=$onnx_top1 want=$want" "$(show)"
  fi
else
  echo "skip - onnx export (python3-torch/python3-h5py/python3-opencv not installed)"
fi
# --- a file without the file CRC line (as written before the line existed) ---------------------
# Refused before HDF5 parses it, naming the tool; tools/stamp_file_crc.py gives a trusted one the
# line back (h5jam writes the user block first) and it verifies and loads again.
mkdir -p "$TMP/legacy"
h5unjam -i "$TMP/t/ckpt-00000060.h5" -o "$TMP/legacy/ckpt-00000060.h5" >/dev/null 2>&1
run legacy_refused 60 "$BIN" --verify-checkpoints --checkpoint-dir "$TMP/legacy"
refused_rc=$RC
refused=$(grep -c "^BAD .*ckpt-00000060.h5: no file CRC line at its start.*tools/stamp_file_crc.py" "$OUT")
run legacy_stamp 60 $PY "$REPO/tools/stamp_file_crc.py" "$TMP/legacy/ckpt-00000060.h5"
run legacy_ok 60 "$BIN" --verify-checkpoints --checkpoint-dir "$TMP/legacy"
if [[ $refused_rc -eq 2 && $refused == 1 && $RC -eq 0 ]] && grep -q "^ok .*ckpt-00000060.h5 (step 60, world size 2)" "$OUT" &&
   h5diff -q "$TMP/t/ckpt-00000060.h5" "$TMP/legacy/ckpt-00000060.h5" >/dev/null; then
  pass "file_without_crc_line_refused_then_stamped_and_loaded (--verify-checkpoints, tools/stamp_file_crc.py)"
else
  fail "file_without_crc_line refused_rc=$refused_rc refused=$refused rc=$RC" "$(show)"
fi
finish
