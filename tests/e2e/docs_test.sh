#!/usr/bin/env bash
# docs_test.sh — the documentation stays a map a user can follow: the README is a five-minute page
# (at most 200 lines) whose table links every page of docs/, every relative link in the README,
# docs/ and bench/results/ resolves, every results file is linked from a docs page, and every flag
# `mnist_ddp --help-all` lists (test seams included) is in docs/flags.md.
source "$(dirname "$0")/lib.sh"
cd "$REPO" || exit 1

lines=$(wc -l <README.md)
if ((lines <= 200)); then
  pass "readme_is_at_most_200_lines ($lines)"
else
  fail "readme_is_at_most_200_lines: README.md has $lines lines"
fi

# Relative links [text](path) and [text](path#anchor): the path must exist, from the file's folder.
broken=$(python3 - README.md docs/*.md bench/results/*.md <<'PY'
import os, re, sys
bad = []
for f in sys.argv[1:]:
    text = re.sub(r"```.*?```", "", open(f).read(), flags=re.S)  # code blocks are not links
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # URLs and in-page anchors
        path = os.path.normpath(os.path.join(os.path.dirname(f), target.split("#")[0]))
        if not os.path.exists(path):
            bad.append(f"{f}: {target}")
print("\n".join(bad))
PY
)
if [[ -z "$broken" ]]; then
  pass "every_relative_link_resolves (README.md, docs/, bench/results/)"
else
  fail "broken relative links" "$broken"
fi

# Every page of docs/ is in the README's documentation table (a row linking docs/PAGE).
unlinked=""
for page in docs/*.md; do
  grep -q "^| \[$page\]($page) |" README.md || unlinked+=" $page"
done
if [[ -z "$unlinked" ]]; then
  pass "readme_table_links_every_docs_page ($(ls docs/*.md | wc -l) pages)"
else
  fail "docs pages the README's table does not link:$unlinked"
fi

# Every results file is linked from some docs page (measurements are read from the docs).
orphans=""
for r in bench/results/*.md; do
  grep -q "bench/results/$(basename "$r")" docs/*.md || orphans+=" $r"
done
if [[ -z "$orphans" ]]; then
  pass "every_results_file_is_linked_from_the_docs ($(ls bench/results/*.md | wc -l) files)"
else
  fail "results files no docs page links:$orphans"
fi

# Every flag of --help-all is documented in docs/flags.md (as `--flag`).
missing=""
n=0
while read -r flag; do
  n=$((n + 1))
  grep -qF -- "\`$flag" docs/flags.md || missing+=" $flag"
done < <("$BIN" --help-all 2>&1 | grep -oE '^  (-[a-z],)?--[a-z][a-z0-9-]+' | sed 's/.*--/--/')
if [[ -z "$missing" && $n -gt 20 ]]; then
  pass "flags_page_documents_every_help_flag ($n flags)"
else
  fail "docs/flags.md misses:$missing (flags seen: $n)"
fi
finish
