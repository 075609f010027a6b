#!/usr/bin/env bash
# module_test.sh — the Lmod modulefile in a non-interactive shell, as a batch script uses it:
# `module use <checkout>/modules; module load mnist_ddp` puts this checkout's mnist_ddp on PATH,
# sets the *_HOME knobs only to prefixes the Makefile can use (the build summary still finds
# every library with them set), and `module unload` takes it all back.
source "$(dirname "$0")/lib.sh"
LMOD_INIT=/usr/share/lmod/lmod/init/bash
if [[ ! -f $LMOD_INIT ]]; then
  echo "skip - modulefile test (Debian's lmod is not installed: tools/install-deps.sh)"
  finish
fi
run module_load 120 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$HOME" bash -c "
  set -euo pipefail
  source $LMOD_INIT
  module use '$REPO/modules'
  module load mnist_ddp
  echo \"which=\$(command -v mnist_ddp)\"
  echo \"root=\$MNIST_DDP_ROOT cuda=\${CUDA_HOME:-unset} mpi=\${MPI_HOME:-unset} blas_threads=\$OPENBLAS_NUM_THREADS\"
  make -s -C '$REPO' summary
  module unload mnist_ddp
  echo \"after_unload=\$(command -v mnist_ddp || echo none) root=\${MNIST_DDP_ROOT:-unset}\"
"
if [[ $RC -eq 0 ]] && grep -q "^which=$REPO/mnist_ddp$" "$OUT" && grep -q "root=$REPO " "$OUT" &&
   grep -q "blas_threads=1" "$OUT" && grep -q "HDF5    : yes" "$OUT" && ! grep -q "NOT FOUND" "$OUT" &&
   grep -q "after_unload=none root=unset" "$OUT"; then
  pass "lmod_module_load_sets_path_and_homes_and_unloads ($(grep -o 'cuda=[^ ]* mpi=[^ ]*' "$OUT"))"
else
  fail "lmod_module_load rc=$RC" "$(show)"
fi
finish
