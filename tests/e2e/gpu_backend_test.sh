#!/usr/bin/env bash
# gpu_backend_test.sh — the GPU backend is a plugin (libmnist_ddp_cuda.so beside the binary,
# app/cuda_backend.hpp): the binary needs no CUDA library; a run on a machine without an
# NVIDIA driver never loads one (--device auto included); with a driver the plugin loads and
# answers (here the toolkit's stub libcuda stands in for a driver, and the plugin's own check then
# reports it as one that cannot run CUDA); a missing plugin is one clear error naming it.
source "$(dirname "$0")/lib.sh"
PLUGIN="$(dirname "$BIN")/libmnist_ddp_cuda.so"
if [[ ! -e "$PLUGIN" ]]; then
  echo "skip - gpu backend plugin (built without CUDA: $BIN has no $(basename "$PLUGIN") beside it)"
  finish
fi
CUDA_NEEDED='lib(cudart|cublas|cublasLt|cudnn|nccl)\.so'

# 1. The binary's own dependencies hold no CUDA library; the plugin's hold all four (the CUDA
#    runtime, cuBLAS (which brings cuBLASLt), cuDNN, NCCL).
bin_cuda=$(readelf -d "$BIN" | grep NEEDED | grep -cE "$CUDA_NEEDED")
plugin_cuda=$(readelf -d "$PLUGIN" | grep NEEDED | grep -oE "$CUDA_NEEDED" | sort -u | paste -sd ' ')
if [[ $bin_cuda -eq 0 && $(wc -w <<<"$plugin_cuda") -eq 4 ]]; then
  pass "binary_needs_no_cuda_library (the plugin needs: $plugin_cuda)"
else
  fail "binary_needs_no_cuda_library: binary $bin_cuda CUDA NEEDED entries, plugin: '$plugin_cuda'" "$(readelf -d "$BIN" | grep NEEDED)"
fi

# 1b. Each function of the plugin has one definition: the binary reaches the PLUGIN entries of the
#    seam through cuda_plugin()'s table and defines none of them (go to definition lands in the
#    plugin), and the step graphs live in the plugin only (Ops::make_step_graphs).
defined=$(nm -C "$BIN" | grep -E ' [TW] mnist_ddp::(make_cuda_ops|make_nccl_comm|make_nccl_group_comm|make_host_staged_comm|make_host_staged_group_comm|use_cuda_device|cuda_device_description|cuda_library_versions)\(|CudaStepGraphs')
in_plugin=$(nm -C "$PLUGIN" | grep -cE ' [TW] mnist_ddp::(make_cuda_ops|make_nccl_comm)\(')
if [[ -z "$defined" && $(nm -C "$BIN" | grep -c ' T mnist_ddp::cuda_plugin()') -eq 1 && $in_plugin -eq 2 ]]; then
  pass "binary_defines_none_of_the_plugins_functions (it has cuda_plugin(); the plugin defines them)"
else
  fail "binary_defines_none_of_the_plugins_functions (plugin has $in_plugin of 2)" "$defined"
fi

# 2. No driver here: --device auto trains on the CPU without mapping any CUDA library (the
#    dynamic loader's own log of the files it opened).
if ldconfig -p 2>/dev/null | grep -q "libcuda\.so\.1 "; then
  echo "skip - auto_on_a_machine_without_a_driver_loads_no_cuda_library (this machine has an NVIDIA driver)"
else
  run auto_no_driver 120 env LD_DEBUG=files LD_DEBUG_OUTPUT="$TMP/ld" "$BIN" --device auto --data "$(small_data)" \
    --max-steps 2 --progress off --log-dir "$TMP/a" --checkpoint-dir "$TMP/a"
  opened=$(cat "$TMP"/ld.* 2>/dev/null | grep -oE "file=[^ ]*($CUDA_NEEDED|libmnist_ddp_cuda)[^ ]*" | sort -u | paste -sd ' ')
  if [[ $RC -eq 0 ]] && grep -q "^done: 2 steps" "$OUT" && [[ -z "$opened" ]] && [[ -n "$(cat "$TMP"/ld.* 2>/dev/null)" ]]; then
    pass "auto_on_a_machine_without_a_driver_loads_no_cuda_library"
  else
    fail "auto_no_driver rc=$RC opened='$opened'" "$(show)"
  fi
fi

# 3. A driver (the toolkit's stub libcuda.so as libcuda.so.1): the loader loads the plugin, every
#    symbol of it resolves against the binary (RTLD_NOW), and its device count says what a stub is.
stub=""
for d in "${CUDA_HOME:-/usr/local/cuda}"/lib64/stubs "${CUDA_HOME:-/usr/local/cuda}"/targets/*/lib/stubs; do
  [[ -e "$d/libcuda.so" ]] && stub="$d/libcuda.so" && break
done
if [[ -z "$stub" ]]; then
  echo "skip - plugin_loads_with_a_driver (no stub libcuda.so in the CUDA toolkit)"
else
  mkdir -p "$TMP/driver" && ln -s "$stub" "$TMP/driver/libcuda.so.1"
  run stub_driver 60 env LD_LIBRARY_PATH="$TMP/driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$BIN" --device cuda --print-env
  if [[ $RC -eq 2 ]] && [[ $(grep -c "mnist_ddp: error: the NVIDIA driver cannot run this mnist_ddp's CUDA [0-9.]* runtime: cudaGetDeviceCount: cudaErrorStubLibrary" "$ERR") == 1 ]]; then
    pass "plugin_loads_with_a_driver_and_its_device_check_answers ($(grep -o 'cudaErrorStubLibrary[^(]*' "$ERR"))"
  else
    fail "plugin_loads_with_a_driver rc=$RC" "$(show)"
  fi
  # 4. The plugin missing (MNIST_DDP_CUDA_BACKEND names the file): one error naming it and the fix.
  run no_plugin 60 env LD_LIBRARY_PATH="$TMP/driver" MNIST_DDP_CUDA_BACKEND="$TMP/nowhere/libmnist_ddp_cuda.so" "$BIN" --device cuda --print-env
  if [[ $RC -eq 2 ]] && [[ $(grep -c "mnist_ddp: error: the GPU backend $TMP/nowhere/libmnist_ddp_cuda.so is missing: keep libmnist_ddp_cuda.so beside the mnist_ddp binary .* or use --device cpu" "$ERR") == 1 ]]; then
    pass "missing_plugin_is_one_clear_error_naming_it"
  else
    fail "missing_plugin rc=$RC" "$(show)"
  fi
  # 5. Another shared library in its place (a mistyped MNIST_DDP_CUDA_BACKEND): loaded, no entry
  #    point, refused with one error naming it; never called.
  zlib=$(ldconfig -p | awk '/libz\.so\.1 .*x86-64/ { print $NF; exit }')
  run foreign_plugin 60 env LD_LIBRARY_PATH="$TMP/driver" MNIST_DDP_CUDA_BACKEND="$zlib" "$BIN" --device cuda --print-env
  if [[ -n "$zlib" && $RC -eq 2 ]] && [[ $(grep -c "mnist_ddp: error: $zlib is not the GPU backend of this mnist_ddp build" "$ERR") == 1 ]]; then
    pass "foreign_library_as_plugin_is_one_clear_error (${zlib})"
  else
    fail "foreign_plugin zlib=$zlib rc=$RC" "$(show)"
  fi
fi

# 6. The seam's header rebuilds both sides: a change to app/cuda_backend.hpp (kCudaBackendAbi)
#    recompiles the binary's loader as well as the plugin's table. The loader's dependency file was
#    once left out of make's -include list, so a bundle paired a new plugin with an old binary
#    that refused it (caught by tools/rehearse-gpu-suite.sh before a GPU call, 2026-11-27).
if [[ "$BIN" == "$REPO/mnist_ddp" && -e "$REPO/build/src/app/cuda_loader.d" ]]; then
  plan=$(make -C "$REPO" --no-print-directory -n -W include/mnist_ddp/app/cuda_backend.hpp mnist_ddp 2>&1)
  if grep -q -- '-o build/src/app/cuda_loader.o' <<<"$plan" &&
     grep -q -- '-o build/src/app/cuda/backend_table.o' <<<"$plan"; then
    pass "seam_header_rebuilds_loader_and_plugin_table"
  else
    fail "seam_header_rebuilds_loader_and_plugin_table: make -n -W cuda_backend.hpp plans" "$(grep -oE -- '-o [^ ]+' <<<"$plan")"
  fi
else
  echo "skip - seam_header_rebuilds_loader_and_plugin_table (not the repository's default build: $BIN)"
fi
finish
