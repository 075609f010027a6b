#!/usr/bin/env bash
# tools_input_test.sh — the tools (compare_runs, plot_metrics, flight_analyze, scaling_projection)
# on a file that is empty, torn (a record cut in the middle of the file: two writers, or damage),
# foreign (a gzip file; JSON of another program; a JSON list): one clear line on stderr naming
# the file, a non-zero exit, no traceback and no output file. And the one damage the metrics
# readers read around: a last line cut short (a job killed while writing it), with a warning.
source "$(dirname "$0")/lib.sh"
T="$REPO/tools"
B="$TMP/bad"
mkdir -p "$B"/{empty,torn,gzip,other,list}
# A metrics file's shapes.
: >"$B/empty/metrics.jsonl"
printf '{"event":"start","run_id":"a","schema":2}\n":34.69961905}\n{"event":"done","schema":2}\n' >"$B/torn/metrics.jsonl"
head -c 400 /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz >"$B/gzip/metrics.jsonl" 2>/dev/null ||
  printf '\x1f\x8b\x08\x00\xff\xfe' >"$B/gzip/metrics.jsonl"
printf '{"name":"not ours","value":1}\n' >"$B/other/metrics.jsonl"
printf '[1,2,3]\n' >"$B/list/metrics.jsonl"
# The same shapes as a flight dump and as a trace.
for k in empty torn gzip other list; do
  cp "$B/$k/metrics.jsonl" "$B/$k/flight-rank0.json"
  cp "$B/$k/metrics.jsonl" "$B/$k/trace.json"
done
printf '{"rank": 0, "world": 2, "com' >"$B/torn/flight-rank0.json"
printf '{"traceEvents": [{"pid": 0, "ph"' >"$B/torn/trace.json"

# refused NAME FILE CMD...: one stderr line naming FILE, exit != 0, no traceback, no PNG.
refused() {
  local name="$1" file="$2"; shift 2
  rm -f "$TMP/out.png"
  run "$name" 60 "$@"
  if [[ $RC -ne 0 ]] && [[ $(wc -l <"$ERR") == 1 ]] && grep -qF -- "$file" "$ERR" &&
     ! grep -q "Traceback" "$ERR" "$OUT" && [[ ! -e "$TMP/out.png" ]]; then
    return 0
  fi
  fail "$name rc=$RC" "$(show)"
  return 1
}
plot=plot_metrics
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  echo "skip - plot_metrics input checks (python3-matplotlib not installed: make deps)"
  plot=""
fi
for tool in compare_runs $plot flight_analyze scaling_projection; do
  ok=0
  for k in empty torn gzip other list; do
    case $tool in
      compare_runs) f="$B/$k/metrics.jsonl"; cmd=("$T/compare_runs" "$f") ;;
      plot_metrics) f="$B/$k/metrics.jsonl"; cmd=("$T/plot_metrics" "$f" -o "$TMP/out.png") ;;
      flight_analyze) f="$B/$k/flight-rank0.json"; cmd=("$T/flight_analyze" "$B/$k") ;;
      scaling_projection) f="$B/$k/trace.json"; cmd=("$T/scaling_projection" "$f" -o "$TMP/out.png") ;;
    esac
    refused "${tool}_$k" "$f" "${cmd[@]}" && ok=$((ok + 1))
  done
  ((ok == 5)) && pass "${tool}_refuses_empty_torn_and_foreign_files (5 kinds: $(head -c 110 "$ERR")...)"
done

# A killed job's metrics: the last line cut short. Read up to it, the line named in a warning.
mkdir -p "$B/killed"
printf '{"event":"start","run_id":"k","schema":2,"config":{}}\n{"event":"train","step":10,"loss":0.5,"images_per_s":100,"schema":2}\n{"event":"tra' >"$B/killed/metrics.jsonl"
run killed_compare 60 "$T/compare_runs" --json "$B/killed"
c_ok=$([[ $RC -eq 0 ]] && grep -q '"run_id": "k"' "$OUT" && grep -q "metrics.jsonl:3: the last line is cut short" "$ERR" && echo yes)
if [[ -n "$plot" ]]; then
  run killed_plot 60 "$T/plot_metrics" "$B/killed/metrics.jsonl" -o "$TMP/k.png"
  p_ok=$([[ $RC -eq 0 ]] && grep -q "1 loss points" "$OUT" && grep -q "the last line is cut short" "$ERR" && echo yes)
else
  p_ok=yes
fi
if [[ $c_ok == yes && $p_ok == yes ]]; then
  pass "a_killed_jobs_last_half_line_is_read_around_with_a_warning"
else
  fail "killed_job_metrics compare=$c_ok plot=$p_ok" "$(show)"
fi
# Runs taking turns in one directory (A, then B, then A resumed): A's records are its two spans,
# none of B's.
mkdir -p "$B/turns"
printf '%s\n' '{"event":"start","run_id":"A","schema":2,"config":{}}' \
  '{"event":"train","step":10,"loss":0.9,"images_per_s":1,"schema":2}' \
  '{"event":"start","run_id":"B","schema":2,"config":{}}' \
  '{"event":"train","step":500,"loss":0.1,"images_per_s":1,"schema":2}' \
  '{"event":"start","run_id":"A","schema":2,"config":{}}' \
  '{"event":"train","step":20,"loss":0.8,"images_per_s":1,"schema":2}' >"$B/turns/metrics.jsonl"
run turns 60 "$T/compare_runs" --json "$B/turns"
if [[ $RC -eq 0 ]] && grep -q '"run_id": "A"' "$OUT" && grep -q '"steps": 20,' "$OUT"; then
  pass "runs_taking_turns_in_one_directory_are_read_apart (A: steps 20, not B's 500)"
else
  fail "runs_taking_turns rc=$RC" "$(show)"
fi
finish
