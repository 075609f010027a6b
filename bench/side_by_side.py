"""side_by_side.py — the results of bench/side_by_side_lib.sh's runs: each run's images/s, training
seconds, ms per step and test top-1 (PyTorch's JSON line, mnist_ddp's `done` record), and per name
the medians of the runs that gave one, with the exit statuses of those that did not.

    from side_by_side import medians
    med, per = medians("bench/results/cpu_runs")   # {name: {images_per_s, ...}}, {name: {ok, fail}}
"""
import json
import statistics


def result(name, d):
    """One run's figures, or None where it left none."""
    try:
        if name.startswith("pytorch"):
            r = json.loads([line for line in open(f"{d}/stdout") if line.startswith("{")][-1])
        else:
            r = [json.loads(line) for line in open(f"{d}/metrics.jsonl") if '"done"' in line][-1]
        steps = r.get("steps") or 0
        return {"images_per_s": r["images_per_s"], "train_s": r["train_s"], "top1": r["top1"],
                "ms_per_step": 1e3 * r["train_s"] / steps if steps else float("nan")}
    except Exception:
        return None


def medians(runs, names=()):
    """Medians per name over RUNS/manifest.tsv; a status that is not a number (a run left out on
    purpose, e.g. "no-units") is neither a result nor a failure."""
    per = {n: {"ok": [], "fail": []} for n in names}
    for line in open(f"{runs}/manifest.tsv"):
        name, _, rc, d = line.rstrip("\n").split("\t")
        p = per.setdefault(name, {"ok": [], "fail": []})
        if not rc.lstrip("-").isdigit():
            p["skipped"] = rc
            continue
        r = result(name, d) if rc == "0" else None
        (p["ok"].append(r) if r else p["fail"].append(rc if rc != "0" else "0, no result"))
    med = {n: {k: statistics.median(x[k] for x in p["ok"]) for k in p["ok"][0]}
           for n, p in per.items() if p["ok"]}
    return med, per
