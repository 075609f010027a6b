#!/usr/bin/env bash
# prepare.sh — prepares the default dataset in data/dataset/ (or $1): real MNIST when this machine
# can download it, otherwise Fashion-MNIST from Debian's `dataset-fashion-mnist` package (same
# IDX format, 60k/10k). Writes DATASET naming what is there; mnist_ddp logs it. Idempotent.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${1:-$here/dataset}"
files=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
# Set MNIST_DDP_FORCE_FASHION=1 to skip the download attempt.
mirrors=(
  "https://ossci-datasets.s3.amazonaws.com/mnist"
  "https://storage.googleapis.com/cvdf-datasets/mnist"
)

complete() {
  [[ -f "$dest/DATASET" ]] || return 1
  for f in "${files[@]}"; do [[ -s "$dest/$f.gz" || -s "$dest/$f" ]] || return 1; done
}

if complete; then
  exit 0
fi
mkdir -p "$dest"

if [[ "${MNIST_DDP_FORCE_FASHION:-0}" != 1 ]] && command -v curl >/dev/null; then
  for m in "${mirrors[@]}"; do
    tmp="$(mktemp -d)"
    ok=1
    for f in "${files[@]}"; do
      if ! curl -fsSL --connect-timeout 5 --max-time 60 -o "$tmp/$f.gz" "$m/$f.gz" 2>/dev/null ||
         ! gzip -t "$tmp/$f.gz" 2>/dev/null; then
        ok=0
        break
      fi
    done
    if ((ok)); then
      mv "$tmp"/*.gz "$dest/"
      rmdir "$tmp"
      echo "mnist (downloaded from $m)" > "$dest/DATASET"
      echo "prepare.sh: MNIST downloaded from $m into $dest"
      exit 0
    fi
    rm -rf "$tmp"
  done
  echo "prepare.sh: MNIST could not be downloaded; using Fashion-MNIST from Debian instead"
fi

src=/usr/share/datasets/fashion-mnist
if [[ ! -f "$src/train-images-idx3-ubyte.gz" ]]; then
  "$here/../tools/install-deps.sh"
fi
if [[ ! -f "$src/train-images-idx3-ubyte.gz" ]]; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "prepare.sh: $src is missing; install it with: apt-get install dataset-fashion-mnist" >&2
  else
    echo "prepare.sh: MNIST could not be downloaded and this machine has no apt-get for Debian's Fashion-MNIST: copy the four MNIST-format files ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]) into $dest, or pass --data DIR (docs/data.md)" >&2
  fi
  exit 1
fi
for f in "${files[@]}"; do ln -sf "$src/$f.gz" "$dest/$f.gz"; done
echo "fashion-mnist (Debian dataset-fashion-mnist, $src)" > "$dest/DATASET"
echo "prepare.sh: Fashion-MNIST (Debian package) linked into $dest"
