#!/usr/bin/env python3
"""stamp_file_crc.py — gives a checkpoint you trust the file CRC line mnist_ddp checks before HDF5
parses a byte of it (mnist_ddp refuses a file without one: "no file CRC line at its start").

  tools/stamp_file_crc.py ckpt-00000450.h5 [more.h5 ...]

For files written by an mnist_ddp from before the line existed (format version 1, and early
version-2 files), and for files edited on purpose. A file whose HDF5 superblock sits at byte 0
(no user block) is first rewritten with a 512-byte user block by h5jam (Debian's hdf5-tools).
The file is replaced atomically; only stamp files whose content you trust: the line vouches for
every byte after it."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_crc import USERBLOCK, stamp_file_crc  # noqa: E402

SIGNATURE = b"\x89HDF\r\n\x1a\n"


def stamp(path):
    with open(path, "rb") as fh:
        head = fh.read(USERBLOCK + len(SIGNATURE))
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".stamp-", suffix=".h5.tmp", dir=d)
    os.close(fd)
    try:
        if head.startswith(SIGNATURE):
            # No user block: h5jam writes one before the file (its content padded to 512 bytes;
            # an empty one would give no block at all).
            fd, block = tempfile.mkstemp(prefix=".ublock-", dir=d)
            os.write(fd, b"\n")
            os.close(fd)
            try:
                subprocess.run(["h5jam", "-i", path, "-u", block, "-o", tmp, "--clobber"], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            finally:
                os.unlink(block)
        elif head[USERBLOCK:USERBLOCK + len(SIGNATURE)] == SIGNATURE:
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                dst.write(src.read())
        else:
            sys.exit(f"stamp_file_crc: {path}: no HDF5 superblock at byte 0 or 512: not a checkpoint")
        with open(tmp, "rb") as fh:
            fh.seek(USERBLOCK)
            if fh.read(len(SIGNATURE)) != SIGNATURE:
                sys.exit(f"stamp_file_crc: {path}: h5jam did not leave a {USERBLOCK}-byte user block; "
                         "the file is unchanged")
        stamp_file_crc(tmp)
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)  # the file keeps its permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    print(f"stamp_file_crc: {path}: file CRC line written")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        stamp(p)
