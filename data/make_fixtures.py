#!/usr/bin/env python3
"""make_fixtures.py — writes tiny MNIST-format data directories for the tests: one valid set and
one per malformation the loader must reject. Standard library only.

usage: make_fixtures.py OUTDIR   -> OUTDIR/<case>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
"""
import gzip
import os
import struct
import sys


def images(n, rows=28, cols=28, magic=b"\x00\x00\x08\x03"):
    body = bytes((i * 7) % 256 for i in range(n * rows * cols))
    return magic + struct.pack(">III", n, rows, cols) + body


def labels(n, bad_at=None):
    body = bytearray(i % 10 for i in range(n))
    if bad_at is not None:
        body[bad_at] = 12
    return b"\x00\x00\x08\x01" + struct.pack(">I", n) + bytes(body)


def write(d, name, data, gz=False):
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name + (".gz" if gz else ""))
    with (gzip.open(path, "wb") if gz else open(path, "wb")) as f:
        f.write(data)


def valid(d, train=40, test=20):
    write(d, "train-images-idx3-ubyte", images(train), gz=True)
    write(d, "train-labels-idx1-ubyte", labels(train), gz=True)
    write(d, "t10k-images-idx3-ubyte", images(test))
    write(d, "t10k-labels-idx1-ubyte", labels(test))
    with open(os.path.join(d, "DATASET"), "w") as f:
        f.write("fixture (data/make_fixtures.py)\n")


def main(out):
    valid(os.path.join(out, "valid"))
    # One malformation per directory (the rest of the directory is valid).
    d = os.path.join(out, "bad_magic"); valid(d)
    write(d, "train-images-idx3-ubyte", b"<htm" + images(40)[4:], gz=True)
    d = os.path.join(out, "truncated"); valid(d)
    write(d, "train-images-idx3-ubyte", images(40)[:-500], gz=True)
    d = os.path.join(out, "wrong_dims"); valid(d)
    write(d, "train-images-idx3-ubyte", images(40, 32, 32), gz=True)
    d = os.path.join(out, "count_mismatch"); valid(d)
    write(d, "train-labels-idx1-ubyte", labels(39), gz=True)
    d = os.path.join(out, "label_range"); valid(d)
    write(d, "t10k-labels-idx1-ubyte", labels(20, bad_at=5))
    d = os.path.join(out, "corrupt_gz"); valid(d)
    with open(os.path.join(d, "train-images-idx3-ubyte.gz"), "r+b") as f:
        f.seek(30); f.write(b"\xff" * 40)
    d = os.path.join(out, "missing_file"); valid(d)
    os.remove(os.path.join(d, "t10k-images-idx3-ubyte"))
    d = os.path.join(out, "swapped"); valid(d)
    write(d, "t10k-images-idx3-ubyte", labels(20))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fixtures")
