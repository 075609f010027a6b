#!/usr/bin/env bash
# gpu-suite.sh — runs on a GPU machine from the repository root, with dist/ from `make bundle`
# (no MPI, HDF5 or oneDNN needed there; CUDA 13 cuDNN/cuBLAS/NCCL come from PyTorch's wheels):
# GPU unit tests, MPI GPU tests, the end-to-end GPU tests and the benchmark against PyTorch DDP.
# Each stage reports and the script goes on, so one run shows everything. Results in $OUT if set.
set -uo pipefail
cd "$(dirname "$0")/.."
B="$PWD/dist/b"
mkdir -p "$B" && tar -C "$B" -xJf dist/bundle.tar.xz
# CUDA libraries of the PyTorch wheels (nvidia-*-cu13), then the bundle's own.
CUDA_LIBS=$(python3 - <<'PY'
import glob, os, site
dirs = set()
for sp in site.getsitepackages():
    for pat in ("nvidia/*/lib", "nvidia/cu13/lib", "torch/lib"):
        dirs.update(os.path.dirname(p) for p in glob.glob(os.path.join(sp, pat, "*.so*")))
print(":".join(sorted(dirs)))
PY
)
export LD_LIBRARY_PATH="$B/lib:$CUDA_LIBS:${LD_LIBRARY_PATH:-}"
export OPAL_PREFIX="$B/mpi" PATH="$B/mpi/bin:$B/bin:$PATH"
export OMPI_MCA_ess_singleton_isolated=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_rmaps_base_oversubscribe=1
rm -rf data/dataset && mkdir -p data && cp -r dist/data data/dataset
ln -sf "$B/bin/mnist_ddp" ./mnist_ddp
mkdir -p build/tests build/bench
ln -sf "$B/bin/unit_tests" build/tests/unit_tests
ln -sf "$B/bin/mpi_tests" build/tests/mpi_tests
ln -sf "$B/bin/ops_bench" build/bench/ops_bench
ln -sf "$B/bin/comm_bench" build/bench/comm_bench
OUT="${OUT:-/tmp/gpu-suite}"
mkdir -p "$OUT"
stage() { echo; echo "=== $1"; shift; "$@" 2>&1 | tee -a "$OUT/gpu-suite.log"; echo "--- exit ${PIPESTATUS[0]}"; }
stage "GPU" nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
stage "unit tests (GPU ops vs CPU reference)" build/tests/unit_tests --gtest_filter='GpuOps.*:GpuChoice.*'
stage "unit tests (all)" build/tests/unit_tests --gtest_brief=1
stage "NCCL, world of one" mpirun -np 1 build/tests/mpi_tests --gtest_filter='Nccl.*:GpuDdp.*'
stage "two ranks sharing the GPU (--comm mpi)" mpirun -np 2 build/tests/mpi_tests --gtest_filter='GpuDdp.*'
stage "end-to-end GPU tests" bash tests/e2e/gpu_test.sh
stage "NCCL all-reduce algbw/busbw, world of one" mpirun -np 1 build/bench/comm_bench --benchmark_filter=Nccl
stage "benchmark vs PyTorch DDP (NCCL), 10 epochs" bash bench/gpu_compare.sh 10
