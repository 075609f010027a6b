#!/usr/bin/python3
"""export_to_pytorch.py — turns an mnist_ddp HDF5 checkpoint into a PyTorch state_dict (.pt) for
the ConvNet below, and optionally evaluates it on an MNIST-format test set with PyTorch.

  tools/export_to_pytorch.py checkpoints/ckpt-00000600.h5 -o convnet.pt
  tools/export_to_pytorch.py checkpoints/ckpt-00000600.h5 --eval data/dataset   # prints JSON
  tools/export_to_pytorch.py checkpoints/ckpt-00000600.h5 --onnx convnet.onnx
    (ONNX, opset of this torch: input "pixels" N x 1 x 28 x 28 float32 in [0, 1], the recorded
    normalisation folded in as its first nodes; output "logits" N x 10)

Needs Debian's python3-torch and python3-h5py (`make deps`). The checkpoint's /model group holds
exactly the ConvNet's state_dict keys and shapes, so loading is a loop (see also docs/checkpoints.md).
"""
import argparse
import json
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convnet_torch import ConvNet, find, keep_freed_memory, read_idx  # noqa: E402


def load_state_dict(path):
    """The state_dict, the root attributes, and the recorded input transform (mean, std), or None
    for a format-version-1 checkpoint, which did not record it."""
    with h5py.File(path, "r") as f:
        if f.attrs.get("format") != b"mnist_ddp-checkpoint" and f.attrs.get("format") != "mnist_ddp-checkpoint":
            sys.exit(f"{path}: not an mnist_ddp checkpoint")
        if int(f.attrs.get("complete", 0)) != 1:
            sys.exit(f"{path}: incomplete checkpoint (the writer did not finish)")
        sd = {k: torch.from_numpy(np.array(v)) for k, v in f["model"].items()}
        meta = {k: (v.decode() if isinstance(v, bytes) else v.item() if hasattr(v, "item") else v)
                for k, v in f.attrs.items() if k != "config"}
        transform = None
        if "data" in f:
            transform = (float(f["data"].attrs["mean"]), float(f["data"].attrs["std"]))
    return sd, meta, transform


def evaluate(model, data_dir, transform):
    if transform is None:
        # A format-version-1 checkpoint: the training set's own mean/std, recomputed (what
        # mnist_ddp did), from this directory's training images.
        print(f"{data_dir}: warning: the checkpoint does not record its input transform "
              "(format version 1); recomputing mean/std from this training set", file=sys.stderr)
        train = read_idx(find(data_dir, "train-images-idx3-ubyte")).astype(np.float64) / 255.0
        transform = (train.mean(), train.std())
    mean, std = transform
    keep_freed_memory()  # batches of 1,000: 11 -> 4 s for the 10,000 images on a 2-core VM
    x = read_idx(find(data_dir, "t10k-images-idx3-ubyte")).astype(np.float32) / 255.0
    y = torch.from_numpy(read_idx(find(data_dir, "t10k-labels-idx1-ubyte")).astype(np.int64))
    x = torch.from_numpy((x - np.float32(mean)) / np.float32(std)).unsqueeze(1)
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for b in range(0, len(y), 1000):
            out = model(x[b:b + 1000])
            correct += int((out.argmax(1) == y[b:b + 1000]).sum())
            loss += float(nn.functional.cross_entropy(out, y[b:b + 1000], reduction="sum"))
    return {"top1": correct / len(y), "correct": correct, "count": len(y), "loss": loss / len(y)}


class WithInputTransform(nn.Module):
    """The ConvNet behind its input transform: raw pixels in [0, 1] in, logits out. Flatten
    (rather than a reshape by the batch size) keeps the ONNX graph static for every runtime."""

    def __init__(self, net, mean, std):
        super().__init__()
        self.net, self.mean, self.std = net, float(mean), float(std)

    def forward(self, pixels):
        x = (pixels - self.mean) / self.std
        return self.net.fc(torch.flatten(self.net.layer2(self.net.layer1(x)), 1))


def export_onnx(model, transform, path):
    wrapped = WithInputTransform(model.eval(), *transform).eval()
    torch.onnx.export(wrapped, torch.zeros(1, 1, 28, 28), path, input_names=["pixels"],
                      output_names=["logits"],
                      dynamic_axes={"pixels": {0: "n"}, "logits": {0: "n"}})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("-o", "--output", help="write the state_dict here (torch.save)")
    ap.add_argument("--eval", metavar="DATA_DIR", help="evaluate on DATA_DIR's t10k files")
    ap.add_argument("--onnx", metavar="PATH",
                    help="also write an ONNX model taking raw pixels in [0, 1] (normalisation "
                         "folded in)")
    a = ap.parse_args()
    sd, meta, transform = load_state_dict(a.checkpoint)
    model = ConvNet()
    model.load_state_dict(sd)  # strict: every key and shape must match
    if a.output:
        torch.save(model.state_dict(), a.output)
    if a.onnx:
        if transform is None:
            sys.exit(f"{a.checkpoint}: a format-version-1 checkpoint does not record its input "
                     "transform, which the ONNX model needs folded in; resume it once with this "
                     "mnist_ddp (its next checkpoint records it)")
        export_onnx(model, transform, a.onnx)
    result = {"checkpoint": a.checkpoint, "step": meta.get("step")}
    if a.eval:
        result.update(evaluate(model, a.eval, transform))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
