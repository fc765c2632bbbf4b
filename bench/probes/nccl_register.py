"""NCCL send/recv between two GPUs from buffers registered with the communicator.

Run with two ranks, one GPU each: ``mpirun -np 2 python3 bench/probes/nccl_register.py``.
Prints the time of 2 GiB and 4 GiB exchanges (one group, or 8 groups as the transpose
pipelines cut them) from CuPy buffers, from ``ncclMemAlloc`` buffers, and from those
buffers registered with ``ncclCommRegister`` (zero-copy over NVLink where NCCL supports
it), alone and beside a copy kernel on half the SMs.
"""

from __future__ import annotations

import ctypes

import cupy as cp
import numpy as np
from cupy.cuda import nccl
from mpi4py import MPI

COPY = r"""
extern "C" __global__ void cp16(const ulonglong2* __restrict__ s, ulonglong2* __restrict__ d, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) d[i] = s[i];
}"""


def libnccl() -> ctypes.CDLL:
    """Return the NCCL library CuPy loaded."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "libnccl.so" in line}
    return ctypes.CDLL(sorted(paths)[0])


def main() -> None:
    """Print the table on rank 0."""
    comm = MPI.COMM_WORLD
    cp.cuda.Device(comm.rank).use()
    uid = comm.bcast(nccl.get_unique_id() if comm.rank == 0 else None)
    nc = nccl.NcclCommunicator(comm.size, uid, comm.rank)
    lib = libnccl()
    say = print if comm.rank == 0 else (lambda *_: None)
    say("NCCL", nccl.get_version())
    peer = 1 - comm.rank
    kernel = cp.RawKernel(COPY, "cp16")
    hi = cp.cuda.Stream(non_blocking=True)
    lo = cp.cuda.Stream(non_blocking=True)
    raw = ctypes.c_void_p(nc.comm)

    def nalloc(n: int) -> int:
        p = ctypes.c_void_p()
        rc = lib.ncclMemAlloc(ctypes.byref(p), ctypes.c_size_t(n))
        assert rc == 0, f"ncclMemAlloc {rc}"
        return p.value

    def register(ptr: int, n: int) -> ctypes.c_void_p:
        h = ctypes.c_void_p()
        rc = lib.ncclCommRegister(raw, ctypes.c_void_p(ptr), ctypes.c_size_t(n), ctypes.byref(h))
        assert rc == 0, f"ncclCommRegister {rc}"
        return h

    for total in (2 << 30, 4 << 30):
        a = cp.ones(total // 8, cp.float64)
        b = cp.empty_like(a)
        cs, cr = cp.ones(total, cp.uint8), cp.empty(total, cp.uint8)
        ns, nr = nalloc(total), nalloc(total)
        cases = [("cupy", cs.data.ptr, cr.data.ptr), ("ncclMemAlloc", ns, nr)]
        handles = []
        for name, sp, rp in cases + [("registered", ns, nr)]:
            if name == "registered":
                handles = [register(ns, total), register(nr, total)]
                comm.Barrier()
            for groups in (1, 8):
                step = total // groups
                for beside in (False, True):
                    times = []
                    for _ in range(6):
                        comm.Barrier()
                        cp.cuda.Device().synchronize()
                        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                        e0.record(hi)
                        if beside:
                            with lo:
                                kernel((66,), (1024,), (a, b, np.int64(a.nbytes // 16)))
                        for g in range(groups):
                            nccl.groupStart()
                            nc.recv(rp + g * step, step, nccl.NCCL_INT8, peer, hi.ptr)
                            nc.send(sp + g * step, step, nccl.NCCL_INT8, peer, hi.ptr)
                            nccl.groupEnd()
                        e1.record(hi)
                        cp.cuda.Device().synchronize()
                        times.append(cp.cuda.get_elapsed_time(e0, e1))
                    t = comm.allreduce(float(np.median(times[1:])), op=MPI.MAX)
                    say(f"{total >> 20:5d} MiB, {name:12s}, {groups} groups, beside copy {beside!s:5}: {t:7.3f} ms")
        for h in handles:
            lib.ncclCommDeregister(raw, h)
        lib.ncclMemFree(ctypes.c_void_p(ns))
        lib.ncclMemFree(ctypes.c_void_p(nr))
        del a, b, cs, cr


if __name__ == "__main__":
    main()
