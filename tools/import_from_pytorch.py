#!/usr/bin/python3
"""import_from_pytorch.py — writes a weights-only mnist_ddp checkpoint from a PyTorch state_dict of
the ConvNet (tools/convnet_torch.py: the same layers, names and shapes), recording the input
transform the weights were trained with, so that

  mnist_ddp --eval-only --resume init.h5      evaluates them, and
  mnist_ddp --init-weights init.h5            trains from them (step 0, fresh optimizer).

  tools/import_from_pytorch.py convnet.pt -o init.h5 [--mean M --std S] [--name TEXT]

The default transform is torchvision's ToTensor alone (pixel / 255: mean 0, std 1), as the classic
PyTorch MNIST examples train; pass --mean/--std when the model was trained with a Normalize.
Every key, shape and dtype is checked first; any mismatch is one error naming the key, and nothing
is written (the file appears only complete, by rename). Needs python3-torch and python3-h5py.
"""
import argparse
import os
import struct
import sys
import tempfile
import time
import zlib

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_crc import USERBLOCK, stamp_file_crc  # noqa: E402
from convnet_torch import ConvNet  # noqa: E402

FORMAT = "mnist_ddp-checkpoint"
VERSION = 2
MODEL = "mnist-convnet-v1"
# The text mnist_ddp records (src: kInputTransform in include/mnist_ddp/checkpoint/checkpoint.hpp).
TRANSFORM = ("x = (pixel / 255 - mean) / std, NCHW float32 (pixel: uint8 in [0, 255], "
             "shape N x 1 x 28 x 28)")


def fail(msg):
    sys.exit(f"import_from_pytorch: {msg}")


def load_state_dict(path):
    """The state_dict in PATH: a dict of tensors as torch.save(model.state_dict()) writes it."""
    try:
        obj = torch.load(path, map_location="cpu")
    except Exception as e:  # not a torch file, truncated, ...
        fail(f"{path}: cannot be read by torch.load ({type(e).__name__}: {e})")
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        fail(f"{path}: not a state_dict (a dict of tensors); save one with "
             "torch.save(model.state_dict(), PATH)")
    return obj


def check(sd, path):
    """Every key of the ConvNet, nothing else, each with its shape and dtype."""
    want = ConvNet().state_dict()
    missing = [k for k in want if k not in sd]
    if missing:
        fail(f"{path}: key {missing[0]} is missing (the ConvNet's state_dict has "
             f"{len(want)} keys; missing: {', '.join(missing)})")
    extra = [k for k in sd if k not in want]
    if extra:
        fail(f"{path}: key {extra[0]} is not in the ConvNet's state_dict (unexpected: "
             f"{', '.join(extra)}); export the seeds' ConvNet (tools/convnet_torch.py)")
    for k, w in want.items():
        v = sd[k]
        if tuple(v.shape) != tuple(w.shape):
            fail(f"{path}: key {k} has shape {tuple(v.shape)}, the ConvNet needs {tuple(w.shape)}")
        if v.dtype != w.dtype:
            fail(f"{path}: key {k} has dtype {str(v.dtype).replace('torch.', '')}, the ConvNet "
                 f"needs {str(w.dtype).replace('torch.', '')} (convert with .to(torch."
                 f"{str(w.dtype).replace('torch.', '')}))")
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            fail(f"{path}: key {k} holds NaN or infinite values")


def fixed(text):
    """A fixed-length string attribute (mnist_ddp reads no variable-length strings)."""
    return np.bytes_(text.encode())


def weights_crc32(arrays, mean, std, name):
    """mnist_ddp's weights_crc32: every dataset's name and bytes in name order, then /data."""
    c = 0
    for k in sorted(arrays):
        c = zlib.crc32(k.encode(), c)
        c = zlib.crc32(np.ascontiguousarray(arrays[k]).astype(arrays[k].dtype.newbyteorder("<")).tobytes(), c)
    c = zlib.crc32(struct.pack("<dd", mean, std), c)
    c = zlib.crc32(struct.pack("<qq", 0, 0), c)  # labels_crc32, train_count: unknown here
    c = zlib.crc32(name.encode(), c)
    c = zlib.crc32(TRANSFORM.encode(), c)
    return c


def write(out, arrays, mean, std, name):
    d = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(prefix=".import-", suffix=".h5.tmp", dir=d)
    os.close(fd)
    try:
        with h5py.File(tmp, "w", userblock_size=USERBLOCK) as f:
            f.attrs["format"] = fixed(FORMAT)
            f.attrs.create("format_version", VERSION, dtype="<i8")
            f.attrs["model"] = fixed(MODEL)
            f.attrs["contents"] = fixed("weights")
            f.attrs.create("step", 0, dtype="<i8")
            f.attrs["program_version"] = fixed("import_from_pytorch.py")
            f.attrs["created"] = fixed(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            g = f.create_group("model")
            for k, v in arrays.items():
                if v.ndim == 0:
                    g.create_dataset(k, data=v, dtype="<i8")  # num_batches_tracked
                else:
                    g.create_dataset(k, data=v, dtype="<f4", chunks=v.shape, fletcher32=True)
            dg = f.create_group("data")
            dg.attrs["name"] = fixed(name)
            dg.attrs.create("mean", mean, dtype="<f8")
            dg.attrs.create("std", std, dtype="<f8")
            dg.attrs.create("labels_crc32", 0, dtype="<u8")
            dg.attrs.create("train_count", 0, dtype="<i8")
            dg.attrs.create("image_shape", np.array([1, 28, 28], dtype="<i8"))
            dg.attrs["transform"] = fixed(TRANSFORM)
            f.attrs.create("weights_crc32", weights_crc32(arrays, mean, std, name), dtype="<u8")
            f.attrs.create("complete", 1, dtype="<i8")  # last
        stamp_file_crc(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("state_dict", help="torch.save(model.state_dict(), PATH) of the ConvNet")
    ap.add_argument("-o", "--output", required=True, help="the weights-only checkpoint (.h5)")
    ap.add_argument("--mean", type=float, default=0.0,
                    help="the input normalisation the weights were trained with (default 0: "
                         "ToTensor alone)")
    ap.add_argument("--std", type=float, default=1.0, help="(default 1: ToTensor alone)")
    ap.add_argument("--name", help="what the weights were trained on (recorded in /data name)")
    a = ap.parse_args()
    if not (np.isfinite(a.mean) and np.isfinite(a.std) and a.std > 0):
        fail(f"--mean {a.mean} / --std {a.std}: need finite values and std > 0")
    sd = load_state_dict(a.state_dict)
    check(sd, a.state_dict)
    arrays = {k: v.detach().cpu().numpy() for k, v in sd.items()}
    name = a.name or f"imported from PyTorch ({os.path.basename(a.state_dict)})"
    write(a.output, arrays, a.mean, a.std, name)
    print(f"import_from_pytorch: wrote {a.output} ({len(arrays)} tensors, input x = (pixel / 255 - "
          f"{a.mean}) / {a.std}); use it with mnist_ddp --init-weights or --eval-only --resume")


if __name__ == "__main__":
    main()
