#!/usr/bin/env bash
# no_apt_test.sh — the README's two commands on a machine without apt-get and dpkg (a RHEL-family
# login node, a site's own stack): their dependency step checks for the libraries where the build
# will look (modules' *_HOME, pkg-config, the compiler's paths) instead of failing on every
# package; with everything there it says so and the build goes on, with something missing it
# prints one message listing what and how to point the build at it, and exits 2. apt-get,
# apt-cache, dpkg and dpkg-query are hidden from PATH (a folder of links to everything else).
source "$(dirname "$0")/lib.sh"
NOAPT="$TMP/noapt-bin"
mkdir -p "$NOAPT"
for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
  [[ -d $d ]] || continue
  for f in "$d"/*; do
    b=$(basename "$f")
    case "$b" in apt-get | apt-cache | apt | dpkg | dpkg-query) continue ;; esac
    [[ -e "$NOAPT/$b" ]] || ln -s "$f" "$NOAPT/$b"
  done
done

if env PATH="$NOAPT" bash -c 'command -v apt-get || command -v dpkg-query'; then
  fail "could not hide apt-get/dpkg-query from PATH"
  finish
fi

# 1. Everything is there (this machine's libraries, found without asking dpkg).
run all_there 120 env PATH="$NOAPT" "$REPO/tools/install-deps.sh" --tests
if [[ $RC -eq 0 ]] && grep -q "^install-deps: no apt-get/dpkg here; found what the build needs: MPI OpenBLAS oneDNN HDF5 zlib CLI11 fmt spdlog nlohmann-json GoogleTest Google Benchmark" "$OUT"; then
  pass "without_apt_the_dependency_step_checks_and_goes_on"
else
  fail "all_there rc=$RC" "$(show)"
fi

# 2. A library the site's module points at the wrong prefix, and no MPI wrapper: one message, each
#    missing library with how to point the build at it, exit 2.
mkdir -p "$TMP/empty"
run missing 120 env PATH="$NOAPT" DNNL_HOME="$TMP/empty" MPICXX=/nonexistent/mpicxx "$REPO/tools/install-deps.sh"
if [[ $RC -eq 2 ]] && grep -q "^install-deps: this machine has no apt-get/dpkg, so nothing can be installed for you, and the build needs:" "$ERR" &&
   grep -q "  - MPI (the mpicxx compiler wrapper): 'module load' the site's MPI" "$ERR" &&
   grep -q "  - oneDNN (dnnl.hpp): DNNL_HOME=$TMP/empty has no include/dnnl.hpp; point it at the right prefix, or unset it" "$ERR" &&
   grep -q "^Found: OpenBLAS HDF5 zlib CLI11 fmt spdlog nlohmann-json\. " "$ERR" && [[ $(grep -c "^  - " "$ERR") == 2 ]]; then
  pass "without_apt_a_missing_library_is_one_message_naming_it_and_the_fix ($(grep -c '^  - ' "$ERR") missing)"
else
  fail "missing rc=$RC" "$(show)"
fi
finish
