#!/usr/bin/env bash
# module_test.sh — the Lmod modulefiles in a non-interactive shell, as a batch script uses them:
# the checkout's (`module use <checkout>/modules`) and an installed tree's (`make install
# PREFIX=DIR`, `module use DIR/share/modulefiles`). Loading puts mnist_ddp and its tools on PATH
# and OPENBLAS_NUM_THREADS=1; unloading leaves the environment exactly as it was (a user's own
# OPENBLAS_NUM_THREADS back, no *_HOME of other packages left behind); the installed tree trains a
# 2-rank job with the checkout hidden; `make uninstall` removes exactly what was installed.
source "$(dirname "$0")/lib.sh"
LMOD_INIT=/usr/share/lmod/lmod/init/bash
if [[ ! -f $LMOD_INIT ]]; then
  echo "skip - modulefile test (Debian's lmod is not installed: tools/install-deps.sh)"
  finish
fi
# env_now FILE: the environment, less what Lmod keeps for its own bookkeeping (its module table and
# reference counts, which `module use` already set before the snapshot taken first).
env_now() { env | grep -vE '^(_ModuleTable[0-9_]*_|__LMOD_|_LMFILES_=|LOADEDMODULES=|LMOD_)' | sort >"$1"; }
declare -f env_now >"$TMP/env_now.sh"

# 1. The checkout's modulefile.
run module_load 120 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$HOME" OPENBLAS_NUM_THREADS=4 bash -c "
  set -euo pipefail
  source $LMOD_INIT
  source $TMP/env_now.sh
  module use '$REPO/modules'
  env_now $TMP/before1
  module load mnist_ddp
  echo \"which=\$(command -v mnist_ddp) tools=\$(command -v compare_runs)\"
  echo \"root=\$MNIST_DDP_ROOT mpi=\${MPI_HOME:-unset} blas_threads=\$OPENBLAS_NUM_THREADS\"
  make -s -C '$REPO' summary
  module unload mnist_ddp
  env_now $TMP/after1
  echo \"after_unload=\$(command -v mnist_ddp || echo none) root=\${MNIST_DDP_ROOT:-unset} blas_threads=\$OPENBLAS_NUM_THREADS\"
"
changed=$(diff "$TMP/before1" "$TMP/after1" 2>&1)
if [[ $RC -eq 0 ]] && grep -q "^which=$REPO/mnist_ddp tools=$REPO/tools/compare_runs$" "$OUT" &&
   grep -q "root=$REPO mpi=unset blas_threads=1" "$OUT" && grep -q "HDF5    : yes" "$OUT" && ! grep -q "NOT FOUND" "$OUT" &&
   grep -q "after_unload=none root=unset blas_threads=4" "$OUT" && [[ -z "$changed" && -s "$TMP/before1" ]]; then
  pass "checkout_module_loads_and_unloads_leaving_the_environment_as_it_was (OPENBLAS_NUM_THREADS 4 -> 1 -> 4, env diff empty)"
else
  fail "checkout_module rc=$RC" "$(show)" "--- env diff:" "$changed"
fi

# 2. make install into a prefix, and that tree with the checkout hidden (a tmpfs over it in a
#    mount namespace of its own, where this machine allows one).
PREFIX="$TMP/prefix"
run install 300 make -s -C "$REPO" install PREFIX="$PREFIX"
install_rc=$RC
# The data outside the checkout (its files may be links into it).
DATA_DIR="$TMP/data"
cp -rL "$REPO/data/dataset" "$DATA_DIR"
cat >"$TMP/installed.sh" <<SH
set -euo pipefail
source $LMOD_INIT
source $REPO/tests/mpi_env.sh
source $TMP/env_now.sh
if [[ "\${1:-}" == hide ]]; then mount -t tmpfs -o size=1m tmpfs '$REPO'; echo "checkout hidden: \$(ls -A '$REPO' | wc -l) files"; fi
cd '$TMP'
module use '$PREFIX/share/modulefiles'
env_now $TMP/before2
module load mnist_ddp
echo "which=\$(command -v mnist_ddp) tools=\$(command -v flight_analyze) plugin=\$(ls '$PREFIX/bin/libmnist_ddp_cuda.so' 2>/dev/null || echo none)"
mpirun -np 2 mnist_ddp --device cpu --data '$DATA_DIR' --epochs 1 --max-steps 3 --progress off --log-dir '$TMP/inst_log' --checkpoint-dir '$TMP/inst_ckpt'
module unload mnist_ddp
env_now $TMP/after2
SH
how="checkout hidden by a tmpfs"
run installed 300 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$HOME" unshare -m --propagation private bash "$TMP/installed.sh" hide
if [[ $RC -ne 0 ]] && ! grep -q "^checkout hidden" "$OUT"; then
  how="checkout in place (no mount namespace here)"
  run installed 300 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$HOME" bash "$TMP/installed.sh"
fi
changed=$(diff "$TMP/before2" "$TMP/after2" 2>&1)
if [[ $install_rc -eq 0 && $RC -eq 0 ]] && grep -q "^which=$PREFIX/bin/mnist_ddp tools=$PREFIX/share/mnist_ddp/tools/flight_analyze" "$OUT" &&
   grep -q "^done: 3 steps" "$OUT" && [[ -z "$changed" && -f "$PREFIX/share/mnist_ddp/slurm/train_2x4.sh" && -f "$PREFIX/share/doc/mnist_ddp/docs/flags.md" ]]; then
  pass "installed_tree_trains_2_ranks_without_the_checkout ($how; module unload leaves the environment as it was)"
else
  fail "installed_tree install=$install_rc rc=$RC ($how)" "$(show)" "--- env diff:" "$changed"
fi

# 3. make uninstall removes what install listed, and nothing it did not.
touch "$PREFIX/bin/someone-elses-tool"
run uninstall 120 make -s -C "$REPO" uninstall PREFIX="$PREFIX"
left=$(cd "$PREFIX" && find . -mindepth 1 | sort | tr '\n' ' ')
if [[ $RC -eq 0 && "$left" == "./bin ./bin/someone-elses-tool " ]] && grep -q "^uninstalled mnist_ddp from $PREFIX" "$OUT"; then
  pass "uninstall_removes_exactly_what_install_put_there ($(grep -o '([0-9]* files)' "$OUT"))"
else
  fail "uninstall rc=$RC left='$left'" "$(show)"
fi
finish
