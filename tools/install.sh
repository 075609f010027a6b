#!/usr/bin/env bash
# install.sh — `make install PREFIX=DIR` and `make uninstall PREFIX=DIR`: a built checkout copied
# to a prefix that works without the checkout:
#   DIR/bin/mnist_ddp, DIR/bin/libmnist_ddp_cuda.so (the GPU plugin stays beside the binary)
#   DIR/libexec/mnist_ddp/comm_bench        (slurm/check_cluster.sh's bandwidth measurement)
#   DIR/share/mnist_ddp/tools/              (compare_runs, flight_analyze, plot_metrics, ...)
#   DIR/share/mnist_ddp/slurm/              (the batch scripts)
#   DIR/share/doc/mnist_ddp/                (README.md and docs/)
#   DIR/share/modulefiles/mnist_ddp/VERSION.lua   (`module use DIR/share/modulefiles`)
# Every file installed is listed in DIR/share/mnist_ddp/MANIFEST, which uninstall removes (and
# nothing else: a prefix shared with other software keeps its files).
#   tools/install.sh [--uninstall] PREFIX
set -euo pipefail
cd "$(dirname "$0")/.."
mode=install
if [[ "${1:-}" == --uninstall ]]; then mode=uninstall; shift; fi
prefix="${1:-}"
if [[ -z "$prefix" ]]; then
  echo "install.sh: give the prefix: make install PREFIX=/opt/mnist_ddp/0.1.0 (or make uninstall PREFIX=...)" >&2
  exit 2
fi
[[ "$prefix" == /* ]] || prefix="$PWD/$prefix"
manifest="$prefix/share/mnist_ddp/MANIFEST"
version=$(sed -n 's/.*kVersion = "\([^"]*\)".*/\1/p' include/mnist_ddp/base/version.hpp)
if [[ -z "$version" ]]; then
  echo "install.sh: no kVersion in include/mnist_ddp/base/version.hpp: run it from a checkout" >&2
  exit 2
fi

if [[ $mode == uninstall ]]; then
  if [[ ! -f "$manifest" ]]; then
    echo "install.sh: $manifest not found: nothing of mnist_ddp is installed in $prefix" >&2
    exit 2
  fi
  n=0
  while read -r f; do
    [[ -n "$f" ]] || continue
    rm -f "$prefix/$f" && n=$((n + 1))
  done <"$manifest"
  rm -f "$manifest"
  # The folders install made, where they are empty now.
  for d in share/modulefiles/mnist_ddp share/modulefiles share/doc/mnist_ddp/docs share/doc/mnist_ddp \
           share/doc share/mnist_ddp/tools share/mnist_ddp/slurm share/mnist_ddp libexec/mnist_ddp \
           libexec bin share; do
    rmdir "$prefix/$d" 2>/dev/null || true
  done
  echo "uninstalled mnist_ddp from $prefix ($n files)"
  exit 0
fi

if [[ ! -x ./mnist_ddp ]]; then
  echo "install.sh: ./mnist_ddp is not built: run make first" >&2
  exit 2
fi
installed=()
put() {  # put SRC DEST_REL MODE
  install -D -m "$3" "$1" "$prefix/$2"
  installed+=("$2")
}
put mnist_ddp bin/mnist_ddp 755
[[ -f libmnist_ddp_cuda.so ]] && put libmnist_ddp_cuda.so bin/libmnist_ddp_cuda.so 755
[[ -x build/bench/comm_bench ]] && put build/bench/comm_bench libexec/mnist_ddp/comm_bench 755
for f in compare_runs flight_analyze plot_metrics scaling_projection metrics_jsonl.py convnet_torch.py \
         export_to_pytorch.py import_from_pytorch.py stamp_file_crc.py ckpt_crc.py; do
  put "tools/$f" "share/mnist_ddp/tools/$f" "$([[ -x tools/$f ]] && echo 755 || echo 644)"
done
for f in slurm/*.sh slurm/README.md; do put "$f" "share/mnist_ddp/$f" "$([[ -x $f ]] && echo 755 || echo 644)"; done
put README.md share/doc/mnist_ddp/README.md 644
for f in docs/*; do put "$f" "share/doc/mnist_ddp/$f" 644; done
module_rel="share/modulefiles/mnist_ddp/$version.lua"
mkdir -p "$(dirname "$prefix/$module_rel")"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" modules/mnist_ddp.lua.in >"$prefix/$module_rel"
installed+=("$module_rel")
printf '%s\n' "${installed[@]}" >"$manifest"
echo "installed mnist_ddp $version in $prefix (${#installed[@]} files); then:"
echo "  module use $prefix/share/modulefiles && module load mnist_ddp"
