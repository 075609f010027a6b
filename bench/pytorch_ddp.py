#!/usr/bin/python3
"""pytorch_ddp.py — the baseline: the same ConvNet, data, per-rank batch, SGD settings and rank
count trained with PyTorch DistributedDataParallel (gloo backend; NCCL with --device cuda), launched
by the same mpirun as mnist_ddp. Data is preloaded as tensors (on the GPU with --device cuda) and
batches are gathered by DistributedSampler indices (cheaper than DataLoader's per-item collation:
PyTorch's best case). On the GPU, eager and --compile alike first run --warmup-steps training steps
(default 3: lazy cuBLAS/cuDNN/NCCL setup, compilation, graph capture) outside the clock, and the
clock stops after a device sync. --amp fp16|bf16: torch.autocast (fp16 with GradScaler, whose
defaults are mnist_ddp's loss-scale rule; bf16 also on the CPU, torch.autocast("cpu")). Prints one
JSON line (images/s, ms per step, accuracy).

mpirun -np 2 /usr/bin/python3 bench/pytorch_ddp.py --data data/dataset --epochs 1
"""
import argparse
import contextlib
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from convnet_torch import ConvNet, find, read_idx  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/dataset")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: NCCL backend, dataset preloaded on the GPU")
    ap.add_argument("--compile", action="store_true",
                    help='torch.compile(mode="reduce-overhead"), i.e. CUDA graphs')
    ap.add_argument("--warmup-steps", type=int, default=None,
                    help="training steps run before the clock starts (they also train); default 3 "
                         "on cuda (lazy library setup, compilation, capture), 0 on cpu (mnist_ddp's "
                         "CPU clock includes its first step too)")
    ap.add_argument("--amp", default="off", choices=["off", "fp16", "bf16"],
                    help="torch.autocast to fp16 (cuda, with GradScaler) or bf16 (cuda or cpu); "
                         "fp32 master weights")
    ap.add_argument("--tf32", default="on", choices=["on", "off"],
                    help="cuda: TF32 for cuDNN convolutions and matmuls (on: as mnist_ddp --tf32 on)")
    a = ap.parse_args()
    if a.device == "cpu" and a.amp == "fp16":
        ap.error("--amp fp16 needs --device cuda (as mnist_ddp); the CPU takes bf16")
    if a.warmup_steps is None:
        a.warmup_steps = 3 if a.device == "cuda" else 0
    if a.device == "cuda" and not torch.cuda.is_available():
        # The words mnist_ddp uses, so a harness tells "no GPU here" from a broken baseline.
        sys.exit(f"error: no usable GPU for --device cuda (torch {torch.__version__}: "
                 f"torch.cuda.is_available() is False, CUDA build {torch.version.cuda})")

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", 0)))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", 1)))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.set_num_threads(a.threads)
    dev = torch.device("cuda", 0) if a.device == "cuda" else torch.device("cpu")
    if a.device == "cuda":
        torch.backends.cudnn.allow_tf32 = a.tf32 == "on"
        torch.backends.cuda.matmul.allow_tf32 = a.tf32 == "on"
    dist.init_process_group("nccl" if a.device == "cuda" else "gloo", rank=rank, world_size=world)
    torch.manual_seed(a.seed)

    xtr = read_idx(find(a.data, "train-images-idx3-ubyte")).astype(np.float32) / 255.0
    ytr = read_idx(find(a.data, "train-labels-idx1-ubyte")).astype(np.int64)
    xte = read_idx(find(a.data, "t10k-images-idx3-ubyte")).astype(np.float32) / 255.0
    yte = read_idx(find(a.data, "t10k-labels-idx1-ubyte")).astype(np.int64)
    mean, std = float(xtr.mean()), float(xtr.std())  # same normalisation as mnist_ddp
    xtr = torch.from_numpy((xtr - mean) / std).unsqueeze(1)
    xte = torch.from_numpy((xte - mean) / std).unsqueeze(1)
    ytr, yte = torch.from_numpy(ytr).to(dev), torch.from_numpy(yte).to(dev)
    xtr, xte = xtr.to(dev), xte.to(dev)

    model = DDP(ConvNet().to(dev), device_ids=[0] if a.device == "cuda" else None)
    crit = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), a.lr, momentum=a.momentum)
    step_model = torch.compile(model, mode="reduce-overhead") if a.compile else model
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.amp)
    scaler = None
    if a.amp == "fp16":  # 65536, x2 after 2000 clean steps, x0.5 and skip on inf/NaN: mnist_ddp's rule
        scaler = (torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler")
                  else torch.cuda.amp.GradScaler())

    def train_step(x, y):
        with (torch.autocast(device_type=a.device, dtype=amp_dtype) if amp_dtype is not None
              else contextlib.nullcontext()):
            loss = crit(step_model(x), y)
        opt.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    # Warm-up, the same for eager and compiled: the first batches of the training set.
    for i in range(a.warmup_steps):
        lo = (i * a.batch_size) % len(ytr)
        train_step(xtr[lo:lo + a.batch_size], ytr[lo:lo + a.batch_size])
    if a.device == "cuda":
        torch.cuda.synchronize()
    sampler = DistributedSampler(range(len(ytr)), num_replicas=world, rank=rank, shuffle=True,
                                 seed=a.seed)
    train_s, images, steps = 0.0, 0, 0
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)), device=dev)
        model.train()
        dist.barrier()
        t0 = time.perf_counter()
        for b in range(0, len(idx), a.batch_size):
            bi = idx[b:b + a.batch_size]
            train_step(xtr[bi], ytr[bi])
            images += len(bi) * world
            steps += 1
        if a.device == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        train_s += time.perf_counter() - t0
    # Exact evaluation: each rank a contiguous shard, totals all-reduced.
    model.eval()
    lo, hi = len(yte) * rank // world, len(yte) * (rank + 1) // world
    correct = torch.zeros(2, device=dev)
    with torch.no_grad():
        for b in range(lo, hi, 1000):
            out = model(xte[b:min(b + 1000, hi)])
            correct[0] += (out.argmax(1) == yte[b:min(b + 1000, hi)]).sum()
            correct[1] += out.shape[0]
    dist.all_reduce(correct)
    if rank == 0:
        print(json.dumps({"impl": "pytorch_ddp_" + ("nccl" if a.device == "cuda" else "gloo")
                          + ("_compiled" if a.compile else "")
                          + ("" if a.amp == "off" else "_amp_" + a.amp),
                          "torch": torch.__version__, "world": world, "amp": a.amp,
                          "tf32": a.tf32 if a.device == "cuda" else None,
                          "warmup_steps": a.warmup_steps, "steps": steps,
                          "ms_per_step": 1e3 * train_s / max(steps, 1),
                          "images_per_s": images / train_s, "train_s": train_s,
                          "top1": float(correct[0] / correct[1]), "test_count": int(correct[1])}))
    # Every rank is done (the result needs all of them), and nothing after this is measured: leave
    # without Python's teardown. PyTorch 1.13's ~ProcessGroupGloo, run from the DDP Reducer's
    # destructor at exit, joins a worker thread that waits for the GIL the exiting thread holds;
    # seen hanging a rank at 100% CPU after its result was printed (bench/compare_precision.sh).
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
