#!/usr/bin/env python3
"""check_trace.py — checks a --trace file against what the timeline promises; prints one summary
line and exits 0, or prints every violation and exits 1.

  check_trace.py TRACE --ranks R --steps A:B --param-bytes N [--hook NAME] [--skew-us US]

Checked: the file is one JSON object with traceEvents (Chrome trace-event format: ph X/i/M,
numeric ts/dur); every rank r is pid r with a process name and named tracks (tid 0 compute,
tid 1 + b communication of bucket b, one lane per bucket: X events on one thread must nest); each rank has exactly the steps A..B-1 as "step" spans; inside each step
the compute spans data, forward layer1/layer2/fc, loss, backward fc/layer2/layer1, wait for
gradients and optimizer, in that order and within the step; the bucket all-reduces on the
communication track carry bucket, bytes and hook, their bytes add up to N, each starts after
the backward of the layer that completes it and ends before the step's wait for gradients ends;
a bucket's all-reduce on one rank overlaps the same all-reduce on every other rank (it cannot
finish before all ranks have started it), within --skew-us of clock skew; every rank has an
evaluate and a checkpoint span (--host-spans).
"""
import argparse
import json
import sys
from collections import defaultdict

COMPUTE_ORDER = ["data", "forward layer1", "forward layer2", "forward fc", "loss", "backward fc",
                 "backward layer2", "backward layer1", "wait for gradients", "optimizer"]
# The layer whose backward completes each bucket (buckets in reverse layer order: fc, layer2, layer1).
BUCKET_AFTER = {0: "backward fc", 1: "backward layer2", 2: "backward layer1"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--steps", required=True)
    ap.add_argument("--param-bytes", type=int, required=True)
    ap.add_argument("--hook", default="none")
    ap.add_argument("--skew-us", type=float, default=100.0)
    ap.add_argument("--host-spans", default="evaluate,checkpoint",
                    help="spans outside steps every rank must have (comma-separated)")
    a = ap.parse_args()
    first, last = (int(x) for x in a.steps.split(":"))
    errors = []
    doc = json.load(open(a.trace))
    events = doc["traceEvents"]
    for e in events:
        if e["ph"] not in ("X", "i", "M"):
            errors.append(f"unknown ph {e['ph']}")
        if e["ph"] in ("X", "i") and not isinstance(e["ts"], (int, float)):
            errors.append(f"ts not a number: {e}")
        if e["ph"] == "X" and (not isinstance(e["dur"], (int, float)) or e["dur"] < 0):
            errors.append(f"bad dur: {e}")
    per_rank = defaultdict(list)
    names = {}
    threads = defaultdict(dict)
    for e in events:
        if e["ph"] == "M" and e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            threads[e["pid"]][e["tid"]] = e["args"]["name"]
        elif e["ph"] == "X":
            per_rank[e["pid"]].append(e)
    if sorted(per_rank) != list(range(a.ranks)):
        errors.append(f"ranks {sorted(per_rank)} != 0..{a.ranks - 1}")
    buckets_of = {}  # (rank, step, bucket) -> (start, end)
    for r in range(a.ranks):
        if not names.get(r, "").startswith(f"rank {r} ("):
            errors.append(f"rank {r}: process name {names.get(r)!r}")
        lanes = {0: "compute", **{1 + b: f"communication: bucket {b}" for b in range(3)}}
        if threads[r] != lanes:
            errors.append(f"rank {r}: tracks {threads[r]}")
        ev = per_rank[r]
        steps = sorted(e["args"]["step"] for e in ev if e["name"] == "step")
        if steps != list(range(first, last)):
            errors.append(f"rank {r}: steps {steps[:3]}..{steps[-3:]} ({len(steps)}) != {first}..{last - 1}")
        by_step = defaultdict(list)
        for e in ev:
            if "step" in e["args"] and e["name"] not in ("evaluate", "checkpoint", "preemption checkpoint"):
                by_step[e["args"]["step"]].append(e)
        for s, spans in by_step.items():
            step = [e for e in spans if e["name"] == "step"]
            if len(step) != 1:
                errors.append(f"rank {r} step {s}: {len(step)} step spans")
                continue
            t0, t1 = step[0]["ts"], step[0]["ts"] + step[0]["dur"]
            compute = sorted((e for e in spans if e["tid"] == 0 and e["name"] != "step"), key=lambda e: e["ts"])
            if [e["name"] for e in compute] != COMPUTE_ORDER:
                errors.append(f"rank {r} step {s}: compute spans {[e['name'] for e in compute]}")
                continue
            named = {e["name"]: e for e in compute}
            for e in compute:
                if e["ts"] < t0 - 0.5 or e["ts"] + e["dur"] > t1 + 0.5:
                    errors.append(f"rank {r} step {s}: {e['name']} outside its step")
            comm = [e for e in spans if e["tid"] >= 1]
            if sum(e["args"]["bytes"] for e in comm) != a.param_bytes:
                errors.append(f"rank {r} step {s}: bucket bytes {[e['args'].get('bytes') for e in comm]} != {a.param_bytes}")
            wait = named["wait for gradients"]
            for e in comm:
                b = e["args"]["bucket"]
                if e["args"].get("hook") != a.hook or e["name"] != f"allreduce bucket {b}" or e["tid"] != 1 + b:
                    errors.append(f"rank {r} step {s}: {e['name']} args {e['args']}")
                after = named[BUCKET_AFTER[b]]
                if e["ts"] < after["ts"] + after["dur"] - 0.5:
                    errors.append(f"rank {r} step {s}: bucket {b} starts before {after['name']} ends")
                if e["ts"] + e["dur"] > wait["ts"] + wait["dur"] + 0.5:
                    errors.append(f"rank {r} step {s}: bucket {b} ends after the wait for gradients")
                buckets_of[(r, s, b)] = (e["ts"], e["ts"] + e["dur"])
        for name in a.host_spans.split(","):
            if not any(e["name"] == name for e in ev):
                errors.append(f"rank {r}: no {name} span")
    worst = float("-inf")
    for (r, s, b), (start, end) in buckets_of.items():
        for q in range(a.ranks):
            other = buckets_of.get((q, s, b))
            if q == r or other is None:
                continue
            # This rank saw it complete (end) only after rank q had started it (other[0]).
            worst = max(worst, other[0] - end)
    if worst > a.skew_us:
        errors.append(f"a bucket completed {worst:.0f} us before another rank started it (> {a.skew_us} us of skew)")
    if errors:
        print("\n".join(errors[:20]))
        return 1
    n = sum(len(v) for v in per_rank.values())
    print(f"{a.ranks} ranks, steps {first}:{last}, {n} spans, bucket bytes {a.param_bytes}/step, "
          f"a bucket's completion on one rank vs its start on another: >= {-worst:.0f} us after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
