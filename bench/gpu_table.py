#!/usr/bin/env python3
"""gpu_table.py — the GPU comparison table of one results folder written by bench/gpu_compare.sh
(RUNS/manifest.tsv: one line per run, NAME ROUND EXIT DIR; RUNS/peak.json when the matrix-product
rates were measured). One row per variant: the MEDIAN over its rounds of images/s, ms per step,
training seconds (device-synchronised) and top-1; the speed against PyTorch eager at the same
precision, against torch.compile (reduce-overhead, TF32) and, where the rates are known, against the
GEMM reference (16.4 MFLOP per image over the rate at the row's precision: a reference, not a
bound). A variant that failed or was not run says so in its row.

  bench/gpu_table.py RUNS EPOCHS ROUNDS [--json FILE]
"""
import argparse
import json
import statistics

LABELS = {  # name: (label, precision), in the table's order
    "pt_eager_tf32": ("PyTorch DDP eager (TF32)", "tf32"),
    "pt_compiled_tf32": ("PyTorch DDP compiled (TF32)", "tf32"),
    "pt_eager_amp_fp16": ("PyTorch DDP eager autocast fp16", "fp16"),
    "pt_eager_amp_bf16": ("PyTorch DDP eager autocast bf16", "bf16"),
    "graphs_tf32": ("mnist_ddp graphs TF32 (default)", "tf32"),
    "eager_tf32": ("mnist_ddp eager TF32", "tf32"),
    "graphs_tf32_own": ("mnist_ddp graphs TF32 --gpu-kernels own", "tf32"),
    "graphs_fp32": ("mnist_ddp graphs FP32", "fp32"),
    "eager_fp32": ("mnist_ddp eager FP32", "fp32"),
    "graphs_amp_fp16": ("mnist_ddp graphs --amp fp16", "fp16"),
    "graphs_amp_bf16": ("mnist_ddp graphs --amp bf16", "bf16"),
}
# The PyTorch eager row each row is compared with: the same precision (FP32 rows against TF32
# eager: PyTorch's fastest FP32-input eager mode; fp16 falls back to bf16 when fp16 was not run).
EAGER = {"tf32": ["pt_eager_tf32"], "fp32": ["pt_eager_tf32"],
         "fp16": ["pt_eager_amp_fp16", "pt_eager_amp_bf16"], "bf16": ["pt_eager_amp_bf16"]}
COMPILED = "pt_compiled_tf32"
FIELDS = ("images_per_s", "ms_per_step", "train_s", "top1")


def result(name, rc, d):
    """(images/s, ms/step, train s, top1) of one run, or None."""
    if rc != "0":
        return None
    try:
        if name.startswith("pt_"):
            r = json.loads([line for line in open(f"{d}/stdout") if line.startswith("{")][-1])
        else:
            r = [json.loads(line) for line in open(f"{d}/metrics.jsonl") if '"done"' in line][-1]
        steps = r.get("steps") or 0
        return (r["images_per_s"], 1e3 * r["train_s"] / steps if steps else float("nan"),
                r["train_s"], r["top1"])
    except Exception:
        return None


def collect(runs):
    per = {n: {"ok": [], "fail": [], "skipped": 0, "rounds": 0} for n in LABELS}
    try:
        lines = open(f"{runs}/manifest.tsv").read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        name, _rnd, rc, d = line.split("\t")
        if name not in per:
            continue
        per[name]["rounds"] += 1
        if rc == "skipped":
            per[name]["skipped"] += 1
            continue
        r = result(name, rc, d)
        if r is None:
            per[name]["fail"].append(rc if rc != "0" else "0, no result")
        else:
            per[name]["ok"].append(r)
    med = {n: tuple(statistics.median(x[i] for x in p["ok"]) for i in range(4))
           for n, p in per.items() if p["ok"]}
    return per, med


def ratio(ips, base, med):
    return ips / med[base][0] if base in med else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("epochs", type=int)
    ap.add_argument("rounds", type=int)
    ap.add_argument("--json", help="also write the medians and ratios here")
    a = ap.parse_args()
    try:
        peak = json.load(open(f"{a.runs}/peak.json"))
    except Exception:
        peak = {}
    per, med = collect(a.runs)
    machine = f"GPU: {peak['gpu']}, torch {peak.get('torch', '?')}; " if "gpu" in peak else ""
    print(f"{machine}{a.epochs} epochs, batch 100; median of {a.rounds} interleaved round(s)")
    if any(k in peak for k in ("tf32", "fp32", "fp16", "bf16")):
        print("matrix-product rate (TFLOP/s): " + ", ".join(
            f"{k} {peak[k]:.1f}" for k in ("tf32", "fp32", "fp16", "bf16") if k in peak))
    print(f"{'implementation':32} {'img/s':>9} {'ms/step':>7} {'train s':>7} {'top-1':>7} "
          f"{'vs eager':>8} {'vs compile':>10} {'of GEMM':>7}  runs")
    rows = {}
    for n, (label, prec) in LABELS.items():
        p = per[n]
        if p["rounds"] == 0:
            continue  # not part of this comparison
        note = f"{len(p['ok'])}/{p['rounds']}"
        if p["fail"]:
            note += " failed (exit " + ", ".join(p["fail"]) + ")"
        if p["skipped"]:
            note += f" {p['skipped']} not run (time budget)"
        if n not in med:
            what = ("failed (exit " + ", ".join(p["fail"]) + ")") if p["fail"] else "not run (time budget)"
            print(f"{label:32} {what}")
            continue
        ips, ms, ts, top1 = med[n]
        base = next((b for b in EAGER[prec] if b in med), EAGER[prec][0])
        vs_eager = None if n.startswith("pt_eager") else ratio(ips, base, med)
        vs_compile = None if n == COMPILED else ratio(ips, COMPILED, med)
        ref = peak.get(prec)
        of = 100 * ips * 16.4e6 / (ref * 1e12) if ref else None
        fmt = lambda v, w, f: (f"{v:{w - 1}{f}}x" if v is not None else f"{'-':>{w}}")
        print(f"{label:32} {ips:9.0f} {ms:7.3f} {ts:7.2f} {100 * top1:6.2f}% "
              f"{fmt(vs_eager, 8, '.2f')} {fmt(vs_compile, 10, '.2f')} "
              f"{(f'{of:6.2f}%' if of is not None else '      ?')}  {note}")
        rows[n] = dict(zip(FIELDS, med[n]), label=label, precision=prec, vs_eager=vs_eager,
                       eager_baseline=base, vs_compile=vs_compile, of_gemm_reference=of)
    print("vs eager: against PyTorch eager at the row's precision (TF32 eager for FP32 rows); vs compile: "
          "against torch.compile reduce-overhead (TF32); of GEMM: images/s x 16.4 MFLOP / the rate")
    if a.json:
        json.dump({"epochs": a.epochs, "rounds": a.rounds, "peak_tflops": peak, "median": rows,
                   "runs": per}, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
