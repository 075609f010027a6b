#!/usr/bin/env python3
"""make_seeds.py — writes the hand-made part of the fuzz seed corpora (tests/fuzz/corpus/{idx,cli,
env}): small valid and typical inputs each fuzzer starts from. The checkpoint seeds are real files
written by mnist_ddp (see tests/fuzz/README.md). Re-running it rewrites the same bytes."""
import gzip
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(corpus, name, data):
    d = os.path.join(HERE, "corpus", corpus)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def images(n):
    return struct.pack(">BBBBIII", 0, 0, 8, 3, n, 28, 28) + bytes((i * 7) % 256 for i in range(n * 784))


def labels(n):
    return struct.pack(">BBBBI", 0, 0, 8, 1, n) + bytes(i % 10 for i in range(n))


# fuzz_idx: first byte even = images, odd = labels; the rest is the file (raw or gzip).
put("idx", "images-raw", b"\x00" + images(2))
put("idx", "images-gz", b"\x00" + gzip.compress(images(2), mtime=0))
put("idx", "labels-raw", b"\x01" + labels(5))
put("idx", "labels-gz", b"\x01" + gzip.compress(labels(5), mtime=0))
put("idx", "labels-swapped", b"\x00" + labels(5))
put("idx", "images-truncated", b"\x00" + images(2)[:-100])

# fuzz_cli: arguments separated by newlines.
for name, args in {
    "default": [],
    "epochs": ["--epochs", "1", "--batch-size", "64", "--lr", "0.05"],
    "resume": ["--resume", "auto", "--checkpoint-dir", "ck", "--keep", "2", "--checkpoint-every", "100"],
    "schedule": ["--lr-schedule", "cosine", "--warmup-steps", "10", "--min-lr=0.001", "--nesterov"],
    "powersgd": ["--compression", "powersgd", "--powersgd-rank", "4", "--powersgd-start-iter", "10"],
    "gpu": ["--device", "cuda", "--amp", "fp16", "--cuda-graphs", "off", "--comm", "nccl"],
    "thread": ["--overlap-engine", "thread", "--bucket-cap-kb", "100", "--collective-timeout", "30"],
    "local_sgd": ["--local-sgd-start", "100", "--local-sgd-period", "8", "--sync-bn"],
    "eval": ["--eval-only", "--resume", "ckpt-00000010.h5"],
    "bad": ["--epochs", "-1", "--batchsize", "5"],
}.items():
    put("cli", name, "\n".join(args).encode())

# fuzz_env: 4 bytes of MPI's view (world-1, rank, local size-1, local rank), then KEY=VALUE lines.
def env(world, rank, local_size, local_rank, pairs):
    head = bytes([world - 1, rank, local_size - 1, local_rank])
    return head + "\n".join(f"{k}={v}" for k, v in pairs).encode()


put("env", "mpirun", env(4, 1, 4, 1, [("OMPI_COMM_WORLD_RANK", 1), ("OMPI_COMM_WORLD_SIZE", 4),
                                       ("OMPI_COMM_WORLD_LOCAL_RANK", 1), ("OMPI_COMM_WORLD_LOCAL_SIZE", 4)]))
put("env", "srun", env(8, 5, 4, 1, [("SLURM_PROCID", 5), ("SLURM_NTASKS", 8), ("SLURM_STEP_NUM_TASKS", 8),
                                     ("SLURM_LOCALID", 1), ("SLURM_NODEID", 1), ("SLURM_JOB_ID", 1234),
                                     ("SLURM_STEP_ID", 0), ("PMIX_RANK", 5), ("SLURM_MPI_TYPE", "pmix")]))
put("env", "srun_no_pmi", env(1, 0, 1, 0, [("SLURM_PROCID", 3), ("SLURM_NTASKS", 8), ("SLURM_STEP_ID", 0),
                                            ("SLURM_JOB_ID", 7), ("SLURM_MPI_TYPE", "none")]))
put("env", "mismatch", env(2, 0, 2, 0, [("SLURM_PROCID", 1), ("SLURM_NTASKS", 2), ("PMIX_RANK", 1)]))
put("env", "salloc_mpirun", env(2, 1, 2, 1, [("SLURM_JOB_ID", 9), ("SLURM_NTASKS", 4),
                                              ("OMPI_COMM_WORLD_RANK", 1), ("OMPI_COMM_WORLD_SIZE", 2)]))
put("env", "singleton", env(1, 0, 1, 0, []))
