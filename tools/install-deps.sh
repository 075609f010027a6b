#!/usr/bin/env bash
# install-deps.sh — installs the Debian packages mnist_ddp needs to build, test and benchmark,
# only those that are missing (idempotent; `make deps` calls it).
set -euo pipefail

PACKAGES=(
  g++ make pkg-config
  openmpi-bin libopenmpi-dev            # MPI
  libopenblas-dev                       # GEMM (fc layer, reference convolutions)
  libdnnl-dev                           # oneDNN convolutions (default CPU backend)
  zlib1g-dev                            # .gz IDX files
  libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev
  libhdf5-dev hdf5-tools                # checkpoints
  libgtest-dev libbenchmark-dev         # tests, benchmarks
  dataset-fashion-mnist                 # default dataset when MNIST cannot be downloaded
  python3-torch python3-h5py python3-numpy  # PyTorch DDP baseline and the export tool
  procps util-linux                     # ps/pgrep, timeout/setsid (the tests use awk, not bc)
  lmod                                  # the modulefile test (modules/)
  python3-matplotlib                    # tools/plot_metrics
)
# --tests: OpenCV's dnn module, the ONNX runtime the export test runs the exported model with.
# --tests: also Debian's clang and its libFuzzer/sanitizer runtimes (`make fuzz`).
if [[ "${1:-}" == --tests ]]; then
  PACKAGES+=(python3-opencv clang libclang-rt-14-dev)
fi
# --tests: the Slurm tests start their own munged/slurmctld/slurmd, which needs root, so as root
# (CI) `make test` also brings the daemons' packages (MNIST_DDP_SLURM_TESTS=0 leaves them out);
# `make run`/`make deps` never install Slurm.
if [[ "${1:-}" == --tests && $(id -u) -eq 0 && "${MNIST_DDP_SLURM_TESTS:-1}" != 0 ]]; then
  PACKAGES+=(slurmctld slurmd slurm-client munge)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "install-deps: not root and no sudo; ask an admin to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# Package lists may be empty on a fresh machine: update once, then install.
if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/mnist_ddp-apt.log 2>&1; then
  $SUDO apt-get update >>/tmp/mnist_ddp-apt.log 2>&1
  if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >>/tmp/mnist_ddp-apt.log 2>&1; then
    tail -20 /tmp/mnist_ddp-apt.log >&2
    echo "install-deps: apt-get install failed (full log: /tmp/mnist_ddp-apt.log)" >&2
    exit 1
  fi
fi
echo "install-deps: done"
