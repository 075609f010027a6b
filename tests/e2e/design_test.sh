#!/usr/bin/env bash
# design_test.sh — docs/DESIGN.md §8 stays true: every source file under src/ is in its
# concern -> source -> tests map, and every source and test the map names exists.
source "$(dirname "$0")/lib.sh"
MAP=$(awk '/^## 8\./ { on = 1 } on' "$REPO/docs/DESIGN.md")
if [[ -z "$MAP" ]]; then
  fail "design_map: no section 8 in docs/DESIGN.md"
  finish
fi
# Backticked paths in the map's rows: sources (column 2, under src/) and tests (column 3).
rows=$(grep '^| ' <<<"$MAP" | grep -v '^| concern\|^|---')
srcs=$(awk -F'|' '{ print $3 }' <<<"$rows" | grep -o '`[^`]*`' | tr -d '`' | sort -u)
tests=$(awk -F'|' '{ print $4 }' <<<"$rows" | grep -o '`[^`]*`' | tr -d '`' | sort -u)
missing_files=""
for f in $srcs; do [[ -f "$REPO/src/$f" ]] || missing_files+=" src/$f"; done
for f in $tests; do [[ -f "$REPO/tests/$f" || -f "$REPO/$f" ]] || missing_files+=" tests/$f"; done
unmapped=""
while read -r f; do
  grep -qx "${f#src/}" <<<"$srcs" || unmapped+=" $f"
done < <(cd "$REPO" && find src -name '*.cpp' -o -name '*.cu' | sort)
if [[ -z "$missing_files" && -z "$unmapped" ]]; then
  pass "design_map_names_every_source_and_only_real_files ($(wc -w <<<"$srcs") sources, $(wc -w <<<"$tests") tests)"
else
  fail "design_map" "named but missing:$missing_files" "sources not in the map:$unmapped"
fi
finish
