#!/usr/bin/env bash
# profile_step.sh — where a CPU training step's time goes, per rank: `perf record` on every rank
# of one training run (the start-up skipped), each rank's samples grouped by the code they fell
# in, as a share and as ms of the measured step:
#   conv forward / data grad / filter grad (oneDNN JIT)
#                               oneDNN's generated convolution kernels, by pass (named by
#                               ONEDNN_JIT_PROFILE=2; the filter gradient's transposes with it)
#   reorders (oneDNN JIT)       oneDNN's layout and precision conversions (weights; under
#                               --amp bf16 also x and dy to bf16); other JIT: the rest
#   convolutions (ours)         conv1_avx2.cpp / conv2_filter_grad_avx2.cpp (the AVX2 path's layer1 and
#                               layer2-filter-gradient kernels), conv1_bf16.cpp (layer1 under
#                               --amp bf16 on AVX512-BF16)
#   BN->ReLU->pool (ours)       the fused kernels (blocked_*.cpp; its layout copies: "other")
#   bf16 rounding (ours)        round_to_bf16, the activations' bf16 copies (to_bf16 on arrays) and the one-value forms (base/half.cpp)
#   fc (OpenBLAS)               the classifier's SGEMMs
#   waiting + MPI               the kernel, sched_yield and Open MPI/UCX: a rank waiting for the
#                               others' gradients, and the all-reduces themselves
#   copies (libc)               memset / memcpy
#   other                       the rest: our loss, SGD, data batches, oneDNN's dispatch
# The shares cover the run after START_S seconds, the per-epoch evaluation (~5% of an epoch) in.
#   bench/profile_step.sh [PATH] [EPOCHS] [RANKS] [BATCH]      (defaults native 3 2 100)
#   AMP=bf16 in the environment profiles an --amp bf16 run (a CPU with AVX512-BF16 or AMX): then
#   oneDNN's JIT code is split by the kernel names it reports (ONEDNN_JIT_PROFILE): its reorders
#   (fp32 <-> bf16 conversions of x, w and dy, and layout copies) apart from the convolutions, and
#   our own bf16 rounding and copies (round_to_bf16, to_bf16) is a row of its own.
#   PATH: native (./mnist_ddp, oneDNN at its widest ISA) or avx2 (the x86-64-v3 build with
#   ONEDNN_MAX_CPU_ISA=AVX2, as bench/compare_isa.sh runs it). START_S (default 3) in the
#   environment. Needs perf (Debian: apt-get install linux-perf); as root, or with
#   kernel.perf_event_paranoid <= 1 for the kernel's share of "waiting + MPI".
set -euo pipefail
cd "$(dirname "$0")/.."
PATH_KIND="${1:-native}" EPOCHS="${2:-3}" RANKS="${3:-2}" BATCH="${4:-100}" START_S="${START_S:-3}"
AMP="${AMP:-off}"
if [[ $AMP != off && $AMP != bf16 ]]; then
  echo "usage: AMP=off|bf16 bench/profile_step.sh ... (got AMP='$AMP')" >&2
  exit 2
fi
if [[ $PATH_KIND != native && $PATH_KIND != avx2 ]]; then
  echo "usage: bench/profile_step.sh [native|avx2] [EPOCHS] [RANKS] [BATCH] (got path '$PATH_KIND')" >&2
  exit 2
fi
for v in "$EPOCHS" "$RANKS" "$BATCH" "$START_S"; do
  if [[ ! $v =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: bench/profile_step.sh [native|avx2] [EPOCHS] [RANKS] [BATCH] (positive whole numbers; got '$v')" >&2
    exit 2
  fi
done
OUT=bench/results/profile_step
# One run at a time: each starts by clearing $OUT, which would pull a running one's files away.
mkdir -p bench/results
exec 9>bench/results/.profile_step.lock
if ! flock -n 9; then
  echo "profile_step.sh: another bench/profile_step.sh is running in this checkout ($OUT is its); wait for it to finish" >&2
  exit 2
fi
if ! command -v perf >/dev/null; then
  echo "profile_step.sh: perf is not installed; on Debian: apt-get install linux-perf" >&2
  exit 2
fi
rm -rf "$OUT" && mkdir -p "$OUT"
V3=x86-64-v3
if [[ $PATH_KIND == native ]]; then
  make -s -j"$(nproc)" all >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 2; }
  BIN=./mnist_ddp
  run_env() { env -u ONEDNN_MAX_CPU_ISA -u OPENBLAS_CORETYPE "$@"; }
else
  make -s -j"$(nproc)" ARCH=$V3 USE_CUDA=0 "build/$V3/mnist_ddp" >"$OUT/build.log" 2>&1 ||
    { tail -20 "$OUT/build.log"; exit 2; }
  BIN="build/$V3/mnist_ddp"
  run_env() { ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell "$@"; }
fi
[[ -f data/dataset/DATASET ]] || data/prepare.sh
source tests/mpi_env.sh
# One perf per rank, started by mpirun in the rank's place (the rank is perf's child and inherits
# its environment, so Open MPI's bootstrap reaches it unchanged).
# ONEDNN_JIT_PROFILE=2: oneDNN writes its generated kernels' names to perf's map (reorders apart).
run_env ONEDNN_JIT_PROFILE=2 mpirun -np "$RANKS" bash -c 'exec perf record -q -F 1999 -D "$2" -o "$1.$OMPI_COMM_WORLD_RANK" -- "${@:3}"' \
  _ "$OUT/perf.data" "$((START_S * 1000))" "$BIN" --device cpu --data data/dataset --epochs "$EPOCHS" \
  --batch-size "$BATCH" --amp "$AMP" --progress off --log-dir "$OUT/log" --checkpoint-dir "$OUT/ckpt" \
  >"$OUT/train.out" 2>&1 || { tail -20 "$OUT/train.out"; exit 2; }
IPS=$(grep -o "at [0-9]* img/s" "$OUT/train.out" | tail -1 | grep -o "[0-9]*") ||
  { echo "profile_step.sh: no 'at N img/s' in $OUT/train.out" >&2; tail -20 "$OUT/train.out" >&2; exit 2; }
echo "$(grep -o 'oneDNN kernels: [^)]*' "$OUT/train.out"); --amp $AMP; $RANKS ranks x batch $BATCH, $EPOCHS epoch(s): $IPS img/s"
# One line per sample ("ip symbol (dso)"), counted below: perf report's per-symbol percentages
# are rounded, and oneDNN's JIT code spreads over thousands of addresses of ~0.01% each.
for ((r = 0; r < RANKS; r++)); do
  perf script -i "$OUT/perf.data.$r" -F ip,sym,dso 2>"$OUT/perf-script.$r.log" >"$OUT/samples.$r.txt" ||
    { echo "profile_step.sh: perf script failed on rank $r's data" >&2; tail -5 "$OUT/perf-script.$r.log" >&2; exit 2; }
done
python3 - "$OUT" "$RANKS" "$BATCH" "$IPS" <<'PY'
import re, sys
out, ranks, batch, ips = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
step_ms = 1000.0 * ranks * batch / ips
groups = ["conv forward (oneDNN JIT)", "conv data grad (oneDNN JIT)", "conv filter grad (oneDNN JIT)",
          "other JIT (oneDNN)", "reorders (oneDNN JIT)", "convolutions (ours)",
          "BN->ReLU->pool (ours)", "bf16 rounding (ours)", "fc (OpenBLAS)", "waiting + MPI",
          "copies (libc)", "other"]
def group(dso, sym):
    if re.search(r"/perf-\d+\.map$", dso):  # code without a file: oneDNN's JIT kernels
        # Named by ONEDNN_JIT_PROFILE=2: each pass's kernels (the filter gradient's transposes with
        # it), the reorders, and the rest (a map without names: every sample "other JIT").
        if "reorder" in sym:
            return "reorders (oneDNN JIT)"
        if "bwd_weights" in sym or sym.startswith("jit_trans"):
            return "conv filter grad (oneDNN JIT)"
        if "bwd_data" in sym:
            return "conv data grad (oneDNN JIT)"
        if "fwd" in sym:
            return "conv forward (oneDNN JIT)"
        return "other JIT (oneDNN)"
    if re.search(r"\b(round_to_bf16|to_bf16|from_bf16)\b", sym):
        return "bf16 rounding (ours)"
    if re.search(r"blocked::.*\b(conv_forward|filter_grad|image_rows?|forward_tile|forward_rows|lane_row|"
                 r"unit_grad|pad_image|add_to|image_conv_forward|image_filter_grad|channel_filter_grad)\b", sym):
        return "convolutions (ours)"
    if re.search(r"mnist_ddp::bf16::(\(anonymous namespace\)::(forward|filter|Padded|add_to|dot)|"
                 r"image_forward|image_filter_grad)", sym):
        return "convolutions (ours)"
    if re.search(r"blocked::.*\b(stats_pass|grad_sums_pass|stats_sums_b|grad_sums_b|forward_b|backward_b|"
                 r"window_\w+|forward_apply_b|backward_apply_b|store_sums|bn_relu_pool_\w+|"
                 r"batchnorm_stats|stats_b)\b", sym):
        return "BN->ReLU->pool (ours)"
    if "openblas" in dso:
        return "fc (OpenBLAS)"
    if (dso.startswith("[kernel") or "sched_yield" in sym or
            re.search(r"lib(mpi|open-pal|open-rte|ucp|uct|ucs|pmix)|mca_", dso)):
        return "waiting + MPI"
    if re.search(r"__mem(set|move|cpy)", sym):
        return "copies (libc)"
    return "other"
shares = []
for r in range(ranks):
    count = dict.fromkeys(groups, 0)
    for line in open(f"{out}/samples.{r}.txt"):
        m = re.match(r"\s*[0-9a-f]+\s+(.*)\s+\((.*)\)\s*$", line)
        if m:
            count[group(m.group(2), m.group(1))] += 1
        elif line.strip():
            count["other"] += 1  # a line perf printed some other way: counted, not dropped
    total = max(sum(count.values()), 1)
    shares.append({g: 100.0 * v / total for g, v in count.items()})
print(f"step {step_ms:.2f} ms (from the run's img/s); per rank: share of its samples, ms of the step")
print(f"{'':28}" + "".join(f"{'rank ' + str(r):>20}" for r in range(ranks)))
for g in groups:
    print(f"{g:28}" + "".join(f"{s[g]:9.1f}% {s[g] * step_ms / 100:6.2f} ms" for s in shares))
PY
echo "(perf data and reports: $OUT)"
