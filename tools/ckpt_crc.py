"""ckpt_crc.py — the file CRC line of mnist_ddp's checkpoints, shared by the Python tools: the first
512 bytes of a checkpoint are an HDF5 user block holding `mnist_ddp-file-crc32 XXXXXXXX size N`,
the CRC32 of every later byte, which mnist_ddp checks before HDF5 parses the file."""
import zlib

USERBLOCK = 512


def stamp_file_crc(path):
    """Writes the user block's line for the bytes the file holds now."""
    with open(path, "r+b") as fh:
        fh.seek(USERBLOCK)
        rest = fh.read()
        line = f"mnist_ddp-file-crc32 {zlib.crc32(rest):08x} size {len(rest)}\n".encode()
        fh.seek(0)
        fh.write(line.ljust(USERBLOCK, b"\0"))
