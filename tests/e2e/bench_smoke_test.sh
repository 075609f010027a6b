#!/usr/bin/env bash
# bench_smoke_test.sh — the benchmark binaries build and run (no timing is asserted here; timings
# belong to `make bench`): comm_bench's all-reduce result check passes on 2 ranks and names the
# rank of a wrong result, its hook
# counters report each hook's bytes per step (PowerSGD's 6.8x cut), ops_bench's fused kernels and
# oneDNN convolutions run (labelled with the kernels and the block), `make ARCH=` builds apart,
# gpu_ops_bench says "no usable GPU" and exits 1 where there is none (it runs in tools/gpu-suite.sh).
source "$(dirname "$0")/lib.sh"
CB="$REPO/build/bench/comm_bench" OB="$REPO/build/bench/ops_bench"
if [[ ! -x $CB || ! -x $OB ]]; then
  fail "bench binaries missing (make build/bench/ops_bench build/bench/comm_bench)"
  finish
fi
run comm_bench 300 mpirun -np 2 "$CB" --benchmark_filter='AllreduceMpi/(4096|1048576)|HookReduce' --benchmark_format=json --benchmark_out="$TMP/cb.json"
counts=$(/usr/bin/python3 - "$TMP/cb.json" <<'PY' 2>&1
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
errors = [r["name"] for r in runs if r.get("error_occurred")]
bw = [r for r in runs if r["name"].startswith("BM_AllreduceMpi")]
hooks = {r["label"]: r["bytes_per_step"] for r in runs if r["name"].startswith("BM_HookReduce")}
ok = not errors and len(bw) == 2 and all(r["busbw_GBps"] > 0 for r in bw) and \
     hooks.get("none") == 29034 * 4 and hooks.get("powersgd") == 4256 * 4 and \
     hooks.get("batched_powersgd_fp16", 1e9) < hooks["powersgd"]
print(("ok" if ok else "bad"), errors, {k: int(v) for k, v in hooks.items()})
PY
)
if [[ $RC -eq 0 && "$counts" == ok* ]] && grep -q "^all-reduce result check: exact on all 2 rank(s)" "$OUT"; then
  pass "comm_bench_runs_with_data_check_and_hook_bytes (${counts#ok }; $(grep -o 'exact on all .*' "$OUT"))"
else
  fail "comm_bench rc=$RC $counts" "$(show)"
fi
# The result check catches a wrong sum on one rank (the test seam adds 1 to one element of rank
# 1's result) and names that rank and its host: exit 1.
run comm_bench_wrong 300 env MNIST_DDP_TEST_CORRUPT_ALLREDUCE=1 mpirun -np 2 "$CB" --benchmark_filter='AllreduceMpi/4096' --benchmark_color=false
if [[ $RC -eq 1 ]] && grep -q "^all-reduce result check: WRONG on rank 1 (host $(hostname)): 50 of 51200 elements differ from the exact sum" "$OUT" &&
   ! grep -q "WRONG on rank 0" "$OUT"; then
  pass "comm_bench_names_the_rank_with_a_wrong_all_reduce_result ($(grep -o 'WRONG on rank 1 ([^)]*)' "$OUT"), exit 1)"
else
  fail "comm_bench_wrong rc=$RC" "$(show)"
fi
run ops_bench 300 "$OB" --benchmark_filter='BM_BnReluPool|BM_OneDnnConv|BM_Bf16Matmul|BM_ModelStep/2' --benchmark_min_time=0.01
# The bf16 rows (--amp bf16's passes, the bf16 GEMM reference, the bf16 step): labelled with
# oneDNN's bf16 kernels where the CPU has bf16 units, skipped with the reason where it has none.
bf16_rows=$(grep -cE "^BM_(OneDnnConvBf16/[12]/[012] .*_bf16.*--amp bf16\)|Bf16Matmul/1024 .*GFLOP/s.*bf16|ModelStep/2 .*onednn bf16)$" "$OUT")
bf16_skips=$(grep -cE "^BM_(OneDnnConvBf16|Bf16Matmul|ModelStep/2).*no bf16 units on this CPU" "$OUT")
if [[ $RC -eq 0 ]] && [[ $(grep -c "BM_BnReluPool/" "$OUT") -ge 8 ]] &&
   [[ $(grep -cE "^BM_OneDnnConv/[12]/[012] .*jit:.* block (8|16)$" "$OUT") -eq 5 ]] &&
   [[ $bf16_rows -eq 7 || $bf16_skips -eq 7 ]]; then
  pass "ops_bench_fused_kernels_and_onednn_convolutions_run ($(grep -m1 -o "jit:.* block [0-9]*" "$OUT"); bf16 rows: $bf16_rows run, $bf16_skips skipped)"
else
  fail "ops_bench rc=$RC bf16 rows $bf16_rows skipped $bf16_skips" "$(show)"
fi
# ARCH= builds a tree for that instruction set in its own folder (bench/compare_isa.sh's AVX2 path).
dry=$(make -s -n -B -C "$REPO" ARCH=x86-64-v3 USE_CUDA=0 build/x86-64-v3/src/data/idx.o 2>&1)
if grep -q -- "-march=x86-64-v3 .*-o build/x86-64-v3/src/data/idx.o" <<<"$dry" && ! grep -q -- "-march=native" <<<"$dry"; then
  pass "arch_builds_in_its_own_folder (make ARCH=x86-64-v3: -march=x86-64-v3, build/x86-64-v3/)"
else
  fail "arch_builds_in_its_own_folder" "$dry"
fi
# The before/after benchmarks refuse what they cannot run, before building or training anything.
run compare_isa_bad 30 "$REPO/bench/compare_isa.sh" one
run_isa=$RC; err_isa=$(cat "$ERR")
run compare_precision_bad 30 "$REPO/bench/compare_precision.sh" 1 two
run_prec=$RC; err_prec=$(cat "$ERR")
run compare_builds_bad 30 "$REPO/bench/compare_builds.sh" /nonexistent "$REPO/mnist_ddp"
if [[ $run_isa -eq 2 && "$err_isa" == *"positive whole numbers; got 'one'"* && $RC -eq 2 ]] &&
   [[ $run_prec -eq 2 && "$err_prec" == *"compare_precision.sh [EPOCHS] [RANKS] [ROUNDS] (positive whole numbers; got 'two')"* ]] &&
   grep -q "usage: bench/compare_builds.sh BINARY_A BINARY_B" "$ERR"; then
  pass "compare_benches_refuse_bad_arguments"
else
  fail "compare benches: isa rc=$run_isa builds rc=$RC" "$err_isa" "$(show)"
fi
# The step profiler: a wrong path or number is refused before anything runs, and so is a second
# run while one holds the checkout's bench/results/profile_step (the lock held here, by flock).
run profile_step_bad_path 30 "$REPO/bench/profile_step.sh" avx512
prof_path=$RC; err_path=$(cat "$ERR")
run profile_step_bad_ranks 30 "$REPO/bench/profile_step.sh" native 1 0
prof_ranks=$RC; err_ranks=$(cat "$ERR")
run profile_step_bad_amp 30 env AMP=fp16 "$REPO/bench/profile_step.sh" native
prof_amp=$RC; err_amp=$(cat "$ERR")
mkdir -p "$REPO/bench/results"
run profile_step_busy 30 flock "$REPO/bench/results/.profile_step.lock" "$REPO/bench/profile_step.sh" native
if [[ $prof_path -eq 2 && "$err_path" == *"[native|avx2]"*"got path 'avx512'"* &&
      $prof_ranks -eq 2 && "$err_ranks" == *"positive whole numbers; got '0'"* &&
      $prof_amp -eq 2 && "$err_amp" == *"AMP=off|bf16"*"got AMP='fp16'"* &&
      $RC -eq 2 ]] && grep -q "another bench/profile_step.sh is running" "$ERR"; then
  pass "profile_step_refuses_bad_arguments_and_a_second_run (path, ranks, AMP)"
else
  fail "profile_step: path rc=$prof_path ranks rc=$prof_ranks amp rc=$prof_amp busy rc=$RC" "$err_path" "$err_ranks" "$err_amp" "$(show)"
fi
GB="$REPO/build/bench/gpu_ops_bench"
if [[ ! -x $GB ]]; then
  fail "gpu_ops_bench missing (make build/bench/gpu_ops_bench)"
elif nvidia-smi -L >/dev/null 2>&1; then
  run gpu_ops_bench 120 "$GB" --benchmark_filter='Conv1Forward|Bn1Stats' --benchmark_min_time=0.01
  if [[ $RC -eq 0 ]] && [[ $(grep -cE "^(Conv1Forward|Bn1Stats)/manual_time" "$OUT") -eq 2 ]]; then
    pass "gpu_ops_bench_runs"
  else
    fail "gpu_ops_bench rc=$RC" "$(show)"
  fi
else
  run gpu_ops_bench 60 "$GB"
  if [[ $RC -eq 1 ]] && grep -q "gpu_ops_bench: error: no usable GPU" "$ERR"; then
    pass "gpu_ops_bench_without_gpu_exits_1"
  else
    fail "gpu_ops_bench without a GPU: rc=$RC" "$(show)"
  fi
fi
finish
