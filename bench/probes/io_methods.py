"""Probe: ways for N ranks to write one file (each its own block), timed with barriers."""

import ctypes
import mmap
import os
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
d = sys.argv[1]
mib = int(sys.argv[2])
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
n = mib << 20
buf = np.full(n, comm.rank + 1, np.uint8)
libc = ctypes.CDLL("libc.so.6", use_errno=True)
path = os.path.join(d, "probe-one.bin")
own = os.path.join(d, f"probe-own-{comm.rank}.bin")


def fresh(alloc):
    """Make the shared file anew (rank 0), its blocks allocated or not."""
    if comm.rank == 0:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        os.ftruncate(fd, n * comm.size)
        if alloc:
            assert libc.fallocate(fd, 0, ctypes.c_long(0), ctypes.c_long(n * comm.size)) == 0
        os.close(fd)
    comm.Barrier()


def pw():
    """Write this rank's block with pwrite."""
    fd = os.open(path, os.O_WRONLY)
    v = memoryview(buf)
    at = n * comm.rank
    while v:
        k = os.pwrite(fd, v, at)
        v = v[k:]
        at += k
    os.close(fd)


def mm():
    """Write this rank's block through a shared mapping."""
    fd = os.open(path, os.O_RDWR)
    m = mmap.mmap(fd, n, mmap.MAP_SHARED, mmap.PROT_WRITE | mmap.PROT_READ, offset=n * comm.rank)
    try:
        m.madvise(23)
    except OSError:
        pass
    m[:] = buf
    m.close()
    os.close(fd)


def ownf():
    """Write this rank's block to a file of its own."""
    try:
        os.remove(own)
    except FileNotFoundError:
        pass
    with open(own, "wb") as f:
        f.write(buf)


def timed(setup, f):
    """Return the median time in ms of `reps` set-up-then-write rounds (set-up untimed)."""
    ts = []
    for _ in range(reps):
        setup()
        comm.Barrier()
        t = time.perf_counter()
        f()
        comm.Barrier()
        ts.append(time.perf_counter() - t)
    return 1e3 * sorted(ts)[len(ts) // 2]


def tfa(setup, f):
    """Return the median time in ms of `reps` rounds, set-up (rank 0's allocation) included."""
    ts = []
    for _ in range(reps):
        comm.Barrier()
        t = time.perf_counter()
        setup()
        f()
        comm.Barrier()
        ts.append(time.perf_counter() - t)
    return 1e3 * sorted(ts)[len(ts) // 2]


r = {
    "own_files": timed(lambda: None, ownf),
    "pwrite_sparse": timed(lambda: fresh(False), pw),
    "pwrite_alloc": timed(lambda: fresh(True), pw),
    "mmap_sparse": timed(lambda: fresh(False), mm),
    "mmap_alloc": timed(lambda: fresh(True), mm),
    "alloc+pwrite": tfa(lambda: fresh(True), pw),
    "alloc+mmap": tfa(lambda: fresh(True), mm),
}
if comm.rank == 0:
    print(f"{comm.size} ranks x {mib} MiB into {d}:", " ".join(f"{k}={v:.1f}ms" for k, v in r.items()), flush=True)
for p in (path, own):
    try:
        os.remove(p)
    except FileNotFoundError:
        pass
