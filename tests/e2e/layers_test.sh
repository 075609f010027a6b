#!/usr/bin/env bash
# layers_test.sh — the folders of src/ and include/mnist_ddp/ are layers that only look down
# (docs/DESIGN.md §2): app on top, then train, checkpoint, comm, model, ops, data, launch, process
# and trace (the timeline), diagnostics, and base (the vocabulary every layer shares) at the bottom; stub/ stands
# in for the CUDA plugin and may see everything. A file that includes a header of a higher layer fails this test, as does a
# public header (include/mnist_ddp/) that includes a private one (src/), as does a file that
# includes another folder's private header (a header two folders share belongs in include/mnist_ddp/,
# where both may include it; checked on a planted violation too). An inclusion that must
# wait for its fix goes in `waiting` with what removes it (none wait now); the list may only shrink.
# The run's Config is read by app/ only. And no source file of src/ or include/ is over 700 lines
# (a reader's limit: split by concern).
source "$(dirname "$0")/lib.sh"
cd "$REPO" || exit 1

check_layers() {  # ROOT: the tree to check (src/ and include/ under it)
  (cd "$1" && python3 - <<'PY'
import glob, os, re, sys
rank = {"base": 0, "diagnostics": 1, "launch": 2, "process": 2, "trace": 2, "data": 3, "ops": 4, "model": 5,
        "comm": 6, "checkpoint": 7, "train": 8, "app": 9, "stub": 10}
# Inclusions not yet removed (issue 47): "file -> header": what removes it.
waiting = {
}
bad, used = [], set()
files = [f for f in glob.glob("src/**/*", recursive=True) + glob.glob("include/**/*", recursive=True)
         if re.search(r"\.(cpp|hpp|cu|cuh)$", f)]
for f in sorted(files):
    parts = f.split("/")
    layer = parts[2] if f.startswith("include/") else parts[1]
    if layer not in rank:
        bad.append(f"{f}: folder '{layer}' is in no layer (layers_test.sh: rank)")
        continue
    for n, line in enumerate(open(f, errors="replace"), 1):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if not m:
            continue
        inc = m.group(1)
        if inc.startswith("mnist_ddp/"):
            target = inc.split("/")[1]
        elif f.startswith("include/"):
            bad.append(f"{f}:{n}: public header includes the private {inc}")
            continue
        else:
            target = inc.split("/")[0] if "/" in inc else layer
            # A private header is its folder's own, and its subfolders' (a concern's backend
            # folder, comm/cuda/, may use comm/'s): "ops/cuda/x.hpp" from src/ops/cuda/ only.
            own = os.path.dirname(os.path.relpath(f, "src"))
            folder = os.path.dirname(inc) if "/" in inc else own
            if folder != own and not own.startswith(folder + "/"):
                bad.append(f"{f}:{n}: includes {inc}, private to src/{folder}/: move it to "
                           f"include/mnist_ddp/{folder}/, where both folders may include it")
                continue
        if target not in rank:
            continue  # a header beside the file (schema.hpp, hdf5_io.hpp, ...)
        key = f"{f} -> {inc}"
        if rank[target] > rank[layer]:
            if key in waiting:
                used.add(key)
            else:
                bad.append(f"{f}:{n}: {layer} includes {inc} of the higher layer {target}")
for key in sorted(set(waiting) - used):
    bad.append(f"listed as waiting but gone (remove it from layers_test.sh): {key}")
print(f"{len(files)} files, {len(used)} inclusions waiting")
print("\n".join(bad))
PY
  )
}
report=$(check_layers "$REPO")
summary=$(head -1 <<<"$report")
problems=$(tail -n +2 <<<"$report")
if [[ -z "$problems" ]]; then
  pass "layers_only_look_down ($summary)"
else
  fail "layers_only_look_down ($summary)" "$problems"
fi

# The rule against another folder's private header catches one: a copy of the tree with a
# planted inclusion of ops/cuda/kernels.cuh from comm/cuda/.
planted="$TMP/layers"
mkdir -p "$planted" && cp -r src include "$planted/"
sed -i '0,/#include/s//#include "ops\/cuda\/kernels.cuh"\n#include/' "$planted/src/comm/cuda/nccl_comm.cu"
caught=$(check_layers "$planted" | grep -c 'comm/cuda/nccl_comm.cu:.*private to src/ops/cuda/')
if [[ "$caught" == 1 ]]; then
  pass "a_private_header_from_another_folder_is_caught (the planted ops/cuda/kernels.cuh in comm/cuda)"
else
  fail "a_private_header_from_another_folder_is_caught (caught $caught)" "$(check_layers "$planted")"
fi

# The run's Config is the app layer's: below it, code takes the option structs app builds
# (its TrainOptions, BackendOptions, ... fields). Comments may name it.
config_below=$(grep -rnw --include='*.cpp' --include='*.hpp' --include='*.cu' --include='*.cuh' \
  'Config' src include | grep -v '^src/app/\|^include/mnist_ddp/app/\|^src/stub/' |
  grep -v '^[^:]*:[0-9]*:\s*//')
if [[ -z "$config_below" ]]; then
  pass "only_app_reads_the_run_config"
else
  fail "only_app_reads_the_run_config (take an option struct, a field of Config)" \
    "$config_below"
fi

long=$(find src include -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) \
  -exec wc -l {} + | awk '$2 != "total" && $1 > 700 { print $2 " (" $1 " lines)" }')
longest=$(find src include -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) \
  -exec wc -l {} + | awk '$2 != "total"' | sort -n | tail -1 | awk '{ print $2 ", " $1 " lines" }')
if [[ -z "$long" ]]; then
  pass "no_source_file_over_700_lines (longest: $longest)"
else
  fail "no_source_file_over_700_lines" "$long"
fi
finish
