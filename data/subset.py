#!/usr/bin/env python3
"""subset.py — the first N training and M test images of a dataset directory, as a dataset
directory of its own (real images and labels, IDX headers counting what was kept). The end-to-end
tests use it where what they check is steps, epochs and files rather than accuracy: an epoch of
6,000 images is 30 steps on 2 ranks, so a test crosses epoch boundaries in seconds. Standard
library only.

usage: subset.py SRC_DIR DST_DIR N_TRAIN N_TEST
"""
import gzip
import os
import struct
import sys


def read(src, stem):
    for name, opener in ((stem + ".gz", gzip.open), (stem, open)):
        path = os.path.join(src, name)
        if os.path.exists(path):
            with opener(path, "rb") as f:
                return f.read()
    sys.exit(f"subset.py: {src} has no {stem}[.gz]; run data/prepare.sh first")


def head(data, n, path):
    # IDX: 2 zero bytes, a type byte (0x08: ubyte), the number of dimensions, then one big-endian
    # uint32 per dimension; the first dimension counts the items.
    ndim = data[3]
    dims = list(struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim]))
    if dims[0] < n:
        sys.exit(f"subset.py: {path} holds {dims[0]} items, fewer than the {n} asked for")
    item = 1
    for d in dims[1:]:
        item *= d
    body = 4 + 4 * ndim
    return data[:4] + struct.pack(">" + "I" * ndim, n, *dims[1:]) + data[body:body + n * item]


def main(src, dst, n_train, n_test):
    os.makedirs(dst, exist_ok=True)
    for split, n in (("train", n_train), ("t10k", n_test)):
        for kind in ("images-idx3", "labels-idx1"):
            stem = f"{split}-{kind}-ubyte"
            out = head(read(src, stem), n, os.path.join(src, stem))
            with gzip.open(os.path.join(dst, stem + ".gz"), "wb", compresslevel=1) as f:
                f.write(out)
    origin = "dataset"
    if os.path.exists(os.path.join(src, "DATASET")):
        origin = open(os.path.join(src, "DATASET")).read().strip()
    with open(os.path.join(dst, "DATASET"), "w") as f:
        f.write(f"first {n_train} training and {n_test} test images of: {origin}\n")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__.strip().splitlines()[-1])
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
