#!/usr/bin/python3
"""pytorch_oracle.py — computes the reference forward/backward of the PyTorch ConvNet in float64
for the model test (tests/unit/model_test.cpp): reads weights, BN buffers, a batch and a mode
from IN, writes loss, logits, parameter gradients and updated running stats to OUT.

IN (little-endian): int32 n, int32 train(1)/frozen(0), float32 params[29034] (state_dict order),
float32 buffers[96] (running_mean/var of layer1 then layer2), float32 x[n*784], int32 y[n].
OUT: float64 loss, logits[n*10], grads[29034], buffers[96].
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from convnet_torch import ConvNet  # noqa: E402


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


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
