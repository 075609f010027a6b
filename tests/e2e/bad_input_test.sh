#!/usr/bin/env bash
# bad_input_test.sh — every bad input (data files, flags, device) under `mpirun -np 2` exits
# non-zero within 30 s with exactly one clear message naming the file/flag.
source "$(dirname "$0")/lib.sh"
python3 "$REPO/data/make_fixtures.py" "$TMP/fx" || { fail "fixtures"; finish; }
# Once a rank exits non-zero, Open MPI's daemon signals the job's other processes and waits
# odls_base_sigkill_timeout (1 s) before SIGKILL, even when every rank has already exited on its
# own, as they do here: 1 s of each of the ~45 launches below that tests nothing of ours.
export OMPI_MCA_odls_base_sigkill_timeout=0

# expect_error NAME EXPECTED_SUBSTRING ARGS...: on the CPU (DEVICE=cuda|auto for the device cases),
# so a GPU machine tests the same thing as this one.
expect_error() {
  local name="$1" want="$2"; shift 2
  run "$name" 60 mpirun -np 2 "$BIN" --device "${DEVICE:-cpu}" --log-dir "$TMP/log" --checkpoint-dir "$TMP/ckpt" --progress off "$@"
  local n; n=$(grep -c "mnist_ddp: error:" "$ERR")
  if [[ $RC -ne 0 && $RC -ne 124 && $RC -ne 137 && "$n" == 1 ]] && grep -q -- "$want" "$ERR" &&
     awk -v s="$SECS" 'BEGIN { exit !(s < 30) }'; then
    pass "$name (exit $RC in ${SECS%???????}s: $(grep -m1 'mnist_ddp: error:' "$ERR" | cut -c1-110))"
  else
    fail "$name: rc=$RC messages=$n secs=$SECS want '$want'" "$(show)"
  fi
}

expect_error unknown_flag "--bogus" --bogus
expect_error batch_zero "--batch-size" --batch-size 0
expect_error negative_lr "--lr" --lr -1
expect_error missing_data_dir "does not exist" --data "$TMP/nowhere"
expect_error bad_magic "not an IDX file" --data "$TMP/fx/bad_magic"
expect_error truncated_file "truncated" --data "$TMP/fx/truncated"
expect_error wrong_dims "32x32, expected 28x28" --data "$TMP/fx/wrong_dims"
expect_error count_mismatch "40 images but" --data "$TMP/fx/count_mismatch"
expect_error label_out_of_range "label 12 at index 5" --data "$TMP/fx/label_range"
expect_error corrupt_gzip "train-images-idx3-ubyte.gz" --data "$TMP/fx/corrupt_gz"
expect_error missing_file "missing t10k-images-idx3-ubyte" --data "$TMP/fx/missing_file"
expect_error swapped_files "are the images and labels files swapped" --data "$TMP/fx/swapped"
# --device cuda fails for a reason that depends on the machine: ask the binary first.
probe=$("$BIN" --device cuda --print-env 2>&1)
if grep -q "built without CUDA" <<<"$probe"; then
  DEVICE=cuda expect_error device_cuda_cpu_only_build "built without CUDA" --data "$TMP/fx/valid"
elif grep -q "no usable GPU" <<<"$probe"; then
  DEVICE=cuda expect_error device_cuda_no_gpu "--device cuda: no usable GPU" --data "$TMP/fx/valid"
elif [[ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" == 1 ]]; then
  # One GPU, two ranks: NCCL needs a GPU per rank.
  DEVICE=cuda expect_error device_cuda_nccl_two_ranks_one_gpu "one GPU per rank" --data "$TMP/fx/valid" --comm nccl
else
  echo "skip - device_cuda (this machine has $(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') GPUs: no --device cuda bad input to provoke)"
fi
expect_error comm_nccl_on_cpu "--comm nccl works on GPU memory" --data "$TMP/fx/valid" --comm nccl
expect_error resume_missing_file "no such file; pass an existing checkpoint" --data "$TMP/fx/valid" --resume "$TMP/none.h5"
expect_error resume_dir_not_file "no such file" --data "$TMP/fx/valid" --resume "$TMP"
expect_error keep_zero "--keep" --keep 0
expect_error checkpoint_every_negative "--checkpoint-every" --checkpoint-every -5
expect_error bucket_cap_zero "--bucket-cap-kb" --bucket-cap-kb 0
expect_error compression_unknown "--compression" --compression zstd
expect_error local_sgd_period_zero "--local-sgd-period" --local-sgd-period 0
expect_error local_sgd_with_compression "--local-sgd-start" --local-sgd-start 5 --compression fp16
expect_error powersgd_rank_zero "--powersgd-rank" --powersgd-rank 0
expect_error powersgd_start_negative "--powersgd-start-iter" --powersgd-start-iter -5
expect_error overlap_engine_unknown "--overlap-engine" --overlap-engine magic
expect_error requeue_signal_unknown "--requeue-signal" --requeue-signal KILL
expect_error collective_timeout_negative "--collective-timeout" --collective-timeout -1
expect_error powersgd_min_rate_negative "--powersgd-min-compression-rate" --powersgd-min-compression-rate -2
expect_error debug_hang_rank_negative "--debug-hang-rank" --debug-hang-rank -5
expect_error flight_recorder_negative "--flight-recorder" --flight-recorder -1
expect_error flight_recorder_not_a_number "--flight-recorder" --flight-recorder lots
expect_error flight_dump_signal_unknown "--flight-dump-signal" --flight-dump-signal KILL
expect_error flight_dump_signal_is_the_requeue_signal "--flight-dump-signal USR1 and --requeue-signal USR1" --flight-dump-signal USR1
expect_error debug_desync_without_fingerprints "add --debug-collectives" --debug-desync-rank 1
MNIST_DDP_TEST_RANKS_PER_NODE=abc expect_error ranks_per_node_seam_garbage "MNIST_DDP_TEST_RANKS_PER_NODE=abc" --local-sgd-start 5
expect_error cuda_graphs_unknown "--cuda-graphs" --cuda-graphs maybe
expect_error cpu_kernels_unknown "--cpu-kernels" --cpu-kernels gpu
expect_error comm_unknown "--comm" --comm tcp
expect_error tf32_unknown "--tf32" --tf32 maybe
expect_error threads_negative "--threads" --threads -1
expect_error amp_fp16_on_cpu "--amp fp16: this run is on the CPU, which has no fp16 training units" --data "$TMP/fx/valid" --amp fp16
expect_error amp_unknown "--amp" --amp fp8
expect_error init_weights_missing_file "weights $TMP/none.h5: no such file" --data "$TMP/fx/valid" --init-weights "$TMP/none.h5"
expect_error init_weights_with_resume "--init-weights starts a new run" --init-weights "$TMP/none.h5" --resume auto
expect_error eval_only_without_checkpoint "--eval-only evaluates a checkpoint" --eval-only
# The checkpoint test seam refuses values it does not know instead of ignoring them.
export MNIST_DDP_TEST_FAIL_CHECKPOINT=bogus
expect_error unknown_test_seam_value "MNIST_DDP_TEST_FAIL_CHECKPOINT=bogus" --data "$TMP/fx/valid" --batch-size 8 --eval-batch-size 8 --max-steps 1
unset MNIST_DDP_TEST_FAIL_CHECKPOINT
touch "$TMP/afile"
expect_error unwritable_log_dir "--log-dir" --data "$TMP/fx/valid" --log-dir "$TMP/afile/sub"

# The fixture itself is fine: the same launch with the valid directory succeeds.
run valid_fixture 120 mpirun -np 2 "$BIN" --device cpu --data "$TMP/fx/valid" --log-dir "$TMP/log" --checkpoint-dir "$TMP/ckpt" --progress off --batch-size 8 --eval-batch-size 8
if [[ $RC -eq 0 ]] && grep -q "fixture (data/make_fixtures.py)" "$OUT"; then pass "valid_fixture_trains"; else fail "valid_fixture_trains rc=$RC" "$(show)"; fi
finish
