"""Single-copy pull through CMA: what an X->Y transpose costs when each rank reads its cells straight from the peer's input.

Run with two ranks: ``N=128 mpiexec -n 2 python bench/probes/cma_pull.py``. Each rank holds an
X-pencil (z, y/2, x) and a Y-pencil (z, y, x/2) of an N^3 grid; the peer's half of every row
is read with ``process_vm_readv`` (rows of N/2 cells, 1024 rows per call) and the own half is
copied with NumPy. Prints the slowest rank's median time per dtype.
"""

from __future__ import annotations

import ctypes
import os
import time

import numpy as np
from mpi4py import MPI


class IoVec(ctypes.Structure):
    """``struct iovec``."""

    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def pull(comm: MPI.Comm, libc: ctypes.CDLL, n: int, dt: type) -> float:
    """Return the slowest rank's median time (s) of one pull for an n^3 grid of ``dt``."""
    r, peer, h = comm.rank, 1 - comm.rank, n // 2
    x = np.ones((n, h, n), dt)
    y = np.zeros((n, n, h), dt)
    e = x.itemsize
    pid, addr = comm.allgather((os.getpid(), x.ctypes.data))[peer]
    rows = n * h
    remote, local = (IoVec * rows)(), (IoVec * rows)()
    for i in range(rows):
        z, yy = divmod(i, h)
        remote[i].base, remote[i].len = addr + ((z * h + yy) * n + r * h) * e, h * e
        local[i].base, local[i].len = y.ctypes.data + ((z * n + peer * h + yy) * h) * e, h * e
    size = ctypes.sizeof(IoVec)
    times = []
    for _ in range(13):
        comm.Barrier()
        t = time.perf_counter()
        y[:, r * h : (r + 1) * h, :] = x[:, :, r * h : (r + 1) * h]
        for s in range(0, rows, 1024):
            k = min(1024, rows - s)
            got = libc.process_vm_readv(pid, ctypes.addressof(local) + s * size, k, ctypes.addressof(remote) + s * size, k, 0)
            if got != k * h * e:
                raise OSError(ctypes.get_errno(), f"process_vm_readv returned {got}")
        comm.Barrier()
        times.append(time.perf_counter() - t)
    return comm.allreduce(float(np.median(times[3:])), op=MPI.MAX)


def main() -> None:
    """Time the pull for complex128 and float64 grids of N^3 cells."""
    comm = MPI.COMM_WORLD
    libc = ctypes.CDLL(None, use_errno=True)
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    n = int(os.environ.get("N", "128"))
    for dt in (np.complex128, np.float64):
        t = pull(comm, libc, n, dt)
        if comm.rank == 0:
            print(f"{n}^3 {np.dtype(dt).name}: {t * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
