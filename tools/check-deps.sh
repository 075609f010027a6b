#!/usr/bin/env bash
# check-deps.sh — on a machine without apt-get/dpkg (a RHEL-family login node, a site's own
# software stack): the libraries `make run` and `make test` need, looked for where the Makefile
# will look (each *_HOME a module or the user sets, pkg-config, the compiler's default paths),
# so the build uses what is there; one message listing what is missing and how to point the build
# at it, exit 2. tools/install-deps.sh runs it where it cannot install.
#   tools/check-deps.sh [--tests]
set -uo pipefail
tests=0
[[ "${1:-}" == --tests ]] && tests=1
CXX="${MPICXX:-${MPI_HOME:+$MPI_HOME/bin/}mpicxx}"
missing=()
found=()
# header_ok HEADER HOME_VAR: the header compiles with that *_HOME's include folder (when set) or
# the compiler's own paths and pkg-config's flags for NAME.
header_ok() {
  local header="$1" home="${!2:-}" flags=""
  [[ -n "$home" ]] && flags="-I$home/include"
  [[ -n "${3:-}" ]] && flags+=" $(pkg-config --cflags "$3" 2>/dev/null)"
  # shellcheck disable=SC2086
  echo "#include <$header>" | "${COMPILER:-c++}" -std=c++20 -x c++ -fsyntax-only $flags - >/dev/null 2>&1
}
check() {  # check NAME HEADER HOME_VAR [PKG]: records NAME as found or missing
  local name="$1" header="$2" homevar="$3" pkg="${4:-}" hint
  # A *_HOME that is set must hold the header: the build takes it for that library's prefix.
  if [[ -n "${!homevar:-}" && ! -f "${!homevar}/include/$header" ]]; then
    missing+=("$name ($header): $homevar=${!homevar} has no include/$header; point it at the right prefix, or unset it")
    return
  fi
  if header_ok "$header" "$homevar" "$pkg"; then
    found+=("$name")
  else
    hint="set $homevar=<prefix with include/$header>"
    [[ -n "$pkg" ]] && hint+=", or make pkg-config find '$pkg' (PKG_CONFIG_PATH)"
    missing+=("$name ($header): $hint, or 'module load' the site's $name")
  fi
}
COMPILER="$CXX"
if ! command -v "$CXX" >/dev/null 2>&1; then
  missing+=("MPI (the mpicxx compiler wrapper): 'module load' the site's MPI (Open MPI 4.1 or later), or set MPI_HOME=<prefix with bin/mpicxx> or MPICXX=<path to mpicxx>")
  COMPILER=c++
else
  found+=("MPI")
fi
check "OpenBLAS" cblas.h OPENBLAS_HOME openblas
check "oneDNN" dnnl.hpp DNNL_HOME
check "HDF5" hdf5.h HDF5_HOME hdf5
check "zlib" zlib.h ZLIB_HOME zlib
check "CLI11" CLI/CLI.hpp CLI11_HOME
check "fmt" fmt/format.h FMT_HOME fmt
check "spdlog" spdlog/spdlog.h SPDLOG_HOME spdlog
check "nlohmann-json" nlohmann/json.hpp JSON_HOME nlohmann_json
if ((tests)); then
  check "GoogleTest" gtest/gtest.h GTEST_HOME gtest
  check "Google Benchmark" benchmark/benchmark.h BENCHMARK_HOME benchmark
fi
if ((${#missing[@]})); then
  {
    echo "install-deps: this machine has no apt-get/dpkg, so nothing can be installed for you, and the build needs:"
    for m in "${missing[@]}"; do echo "  - $m"; done
    echo "Found: ${found[*]:-nothing}. Load the site's modules or set the variables above, then run the same make command again (docs/building.md)."
  } >&2
  exit 2
fi
echo "install-deps: no apt-get/dpkg here; found what the build needs: ${found[*]} (PyTorch, Slurm and the rest the tests use are skipped where absent)"
