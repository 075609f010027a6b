#!/usr/bin/python3
"""pytorch_oracle.py — PyTorch as the reference, two ways.

1. `pytorch_oracle.py IN OUT`: the forward/backward of the PyTorch ConvNet in float64 for the
model test (tests/unit/model_test.cpp): reads weights, BN buffers, a batch and a mode from IN,
writes loss, logits, parameter gradients and updated running stats to OUT.

2. `mpirun -np R pytorch_oracle.py ddp-accumulate --init W.pt --data DIR --samples DIR
--batch B --accumulate N --steps S --out P.npz`: PyTorch DistributedDataParallel (gloo) trained
the way `mnist_ddp --accumulate N` trains: each optimizer step is N micro-batches of B images per
rank, the first N-1 inside `ddp.no_sync()`, each loss divided by N, then SGD (--lr, --momentum);
rank r trains on the indices mnist_ddp's rank r logged (--debug-sample-log DIR, epoch 1), in
that order, from the weights W.pt, on images p/255 (the transform of weights imported from
PyTorch). Rank 0 writes its final state_dict (parameters, BN running statistics and
num_batches_tracked) to P.npz, as float32/int64 (with --every-step also each step's, as
'step<S>/<name>'). --float64 trains in float64; --autocast-bf16 runs the forward under CPU autocast
in bf16 (mnist_ddp --amp bf16's oracle).

IN (little-endian): int32 n, int32 train(1)/frozen(0), float32 params[29034] (state_dict order),
float32 buffers[96] (running_mean/var of layer1 then layer2), float32 x[n*784], int32 y[n].
OUT: float64 loss, logits[n*10], grads[29034], buffers[96].

Exit status 77 (and one line) where this Python has no torch or numpy: the model test skips on it
instead of starting Python once more to ask first.
"""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ModuleNotFoundError as e:
    if e.name not in ("numpy", "torch"):
        raise  # torch or numpy installed but broken: a failure, not a skip
    print(f"pytorch_oracle.py: {sys.executable}: {e} (make deps installs python3-torch)", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from convnet_torch import ConvNet, keep_freed_memory  # noqa: E402

keep_freed_memory()  # float64 convolutions: a page fault storm per call otherwise


def main(inp, out):
    raw = open(inp, "rb").read()
    n, train = np.frombuffer(raw[:8], dtype="<i4")
    off = 8
    params = np.frombuffer(raw[off:off + 29034 * 4], dtype="<f4"); off += 29034 * 4
    bufs = np.frombuffer(raw[off:off + 96 * 4], dtype="<f4"); off += 96 * 4
    x = np.frombuffer(raw[off:off + n * 784 * 4], dtype="<f4"); off += n * 784 * 4
    y = np.frombuffer(raw[off:off + n * 4], dtype="<i4")
    m = ConvNet().double()
    i = 0
    for p in m.parameters():
        p.data.copy_(torch.from_numpy(params[i:i + p.numel()].astype(np.float64)).view_as(p))
        i += p.numel()
    j = 0
    for bn in (m.layer1[1], m.layer2[1]):
        for t in (bn.running_mean, bn.running_var):
            t.copy_(torch.from_numpy(bufs[j:j + t.numel()].astype(np.float64)))
            j += t.numel()
    m.train() if train else m.eval()
    logits = m(torch.from_numpy(x.astype(np.float64)).view(int(n), 1, 28, 28))
    loss = nn.functional.cross_entropy(logits, torch.from_numpy(y.astype(np.int64)))
    loss.backward()
    grads = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
    newbufs = torch.cat([t.reshape(-1) for bn in (m.layer1[1], m.layer2[1])
                         for t in (bn.running_mean, bn.running_var)])
    res = np.concatenate([[loss.item()], logits.detach().numpy().reshape(-1),
                          grads.numpy(), newbufs.numpy()]).astype("<f8")
    open(out, "wb").write(res.tobytes())


def ddp_accumulate(argv):
    import argparse
    import contextlib
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from convnet_torch import find, read_idx  # noqa: E402

    ap = argparse.ArgumentParser(prog="pytorch_oracle.py ddp-accumulate")
    ap.add_argument("--init", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--samples", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--accumulate", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--out", required=True)
    ap.add_argument("--float64", action="store_true",
                    help="train in float64 (the reference without float32 rounding of its own)")
    ap.add_argument("--autocast-bf16", action="store_true",
                    help="forward under torch.autocast('cpu', dtype=torch.bfloat16), as "
                         "mnist_ddp --amp bf16 trains on the CPU")
    ap.add_argument("--every-step", action="store_true",
                    help="also write each step's state, as 'step<S>/<name>' (S from 1)")
    a = ap.parse_args(argv)
    dtype = torch.float64 if a.float64 else torch.float32
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    # One port per mpirun job (its ranks share the job id), so concurrent runs do not collide.
    os.environ.setdefault("MASTER_PORT",
                          str(29500 + int(os.environ.get("OMPI_MCA_ess_base_jobid", "41")) % 2000))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x_all = read_idx(find(a.data, "train-images-idx3-ubyte"))
    y_all = read_idx(find(a.data, "train-labels-idx1-ubyte")).astype(np.int64)
    order = [int(line) for line in open(os.path.join(a.samples, f"samples-epoch1-rank{rank}.txt"))]
    model = ConvNet()
    model.load_state_dict(torch.load(a.init))
    model = model.to(dtype)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), a.lr, momentum=a.momentum)
    crit = nn.CrossEntropyLoss()
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if a.autocast_bf16
                else contextlib.nullcontext())

    def state(prefix=""):
        return {prefix + k: (v.float() if v.is_floating_point() else v).numpy().copy()
                for k, v in model.state_dict().items()}

    steps = {}
    at = 0
    for step in range(1, a.steps + 1):
        for i in range(a.accumulate):
            idx = order[at:at + a.batch]
            at += a.batch
            x = torch.from_numpy(x_all[idx].astype(np.float32) / 255.0).unsqueeze(1).to(dtype)
            y = torch.from_numpy(y_all[idx])
            with ddp.no_sync() if i < a.accumulate - 1 else contextlib.nullcontext():
                with autocast:
                    loss = crit(ddp(x), y) / a.accumulate
                loss.backward()
        opt.step()
        opt.zero_grad()
        if a.every_step:
            steps.update(state(f"step{step}/"))
    if rank == 0:
        np.savez(a.out, **state(), **steps)
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "ddp-accumulate":
        ddp_accumulate(sys.argv[2:])
    else:
        main(sys.argv[1], sys.argv[2])
