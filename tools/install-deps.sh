#!/usr/bin/env bash
# install-deps.sh — installs the Debian packages mnist_ddp needs to build, test and benchmark,
# only those that are missing (idempotent; `make deps` calls it).
#   (none)   what `make run` needs: the build, the dataset, PyTorch for the baseline and tools.
#   --tests  all that, and what `make test` adds (OpenCV, clang and its sanitizer runtimes, and as
#            root the Slurm daemons).
#   --build  only what compiles every tree, sanitizer and fuzz trees included (clang): CI installs
#            these first and builds while the rest installs (`--tests` afterwards adds the rest).
#   --aarch64  the cross compiler, qemu-user and mmdebstrap (`make test-aarch64`).
#   --mpich  Debian's MPICH beside Open MPI (`make test-mpich`; Open MPI stays the default mpicxx).
set -euo pipefail
mode="${1:-}"
case "$mode" in
  "" | --tests | --build | --aarch64 | --mpich) ;;
  *) echo "install-deps: unknown option '$mode' (use --tests, --build, --aarch64, --mpich, or nothing)" >&2; exit 2 ;;
esac

BUILD_PACKAGES=(
  g++ make pkg-config
  openmpi-bin libopenmpi-dev            # MPI
  libopenblas-dev                       # GEMM (fc layer, reference convolutions)
  libdnnl-dev                           # oneDNN convolutions (default CPU backend)
  zlib1g-dev                            # .gz IDX files
  libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev
  libhdf5-dev                           # checkpoints
  libgtest-dev libbenchmark-dev         # tests, benchmarks
)
# The sanitizer and fuzz trees compile with Debian's clang and link its libFuzzer/sanitizer
# runtimes (`make test-sanitize`, `make fuzz`); libomp-14-dev holds the <omp.h> clang reads (GCC's
# copy is in GCC's own include folder, which clang does not search).
CLANG_PACKAGES=(clang libclang-rt-14-dev libomp-14-dev)
PACKAGES=(
  "${BUILD_PACKAGES[@]}"
  hdf5-tools                            # h5dump/h5diff (checkpoint tests and tools)
  dataset-fashion-mnist                 # default dataset when MNIST cannot be downloaded
  python3-torch python3-h5py python3-numpy  # PyTorch DDP baseline and the export tool
  procps util-linux                     # ps/pgrep, timeout/setsid (the tests use awk, not bc)
  lmod                                  # the modulefile test (modules/)
  python3-matplotlib                    # tools/plot_metrics
)
# --tests: OpenCV's dnn module, the ONNX runtime the export test runs the exported model with.
if [[ "$mode" == --tests ]]; then
  PACKAGES+=(python3-opencv "${CLANG_PACKAGES[@]}")
fi
# --tests: the Slurm tests start their own munged/slurmctld/slurmd, which needs root, so as root
# (CI) `make test` also brings the daemons' packages (MNIST_DDP_SLURM_TESTS=0 leaves them out);
# `make run`/`make deps` never install Slurm.
if [[ "$mode" == --tests && $(id -u) -eq 0 && "${MNIST_DDP_SLURM_TESTS:-1}" != 0 ]]; then
  PACKAGES+=(slurmctld slurmd slurm-client munge)
fi
if [[ "$mode" == --build ]]; then
  PACKAGES=("${BUILD_PACKAGES[@]}" "${CLANG_PACKAGES[@]}")
fi
if [[ "$mode" == --aarch64 ]]; then
  PACKAGES=(g++-aarch64-linux-gnu qemu-user-static binfmt-support mmdebstrap arch-test binutils)
fi
if [[ "$mode" == --mpich ]]; then
  PACKAGES=("${BUILD_PACKAGES[@]}" mpich libmpich-dev)
fi

# No apt-get/dpkg (a RHEL-family login node, a site's own stack): nothing can be installed here;
# check for what the build needs where the Makefile looks, and say what is missing.
if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  args=()
  [[ "$mode" == --tests ]] && args=(--tests)
  exec "$(dirname "$0")/check-deps.sh" "${args[@]}"
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
