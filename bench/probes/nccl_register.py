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
from cupy.cuda import nccl
from nccl_pair import pair


def libnccl() -> ctypes.CDLL:
    """Return the NCCL library CuPy loaded."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "libnccl.so" in line}
    return ctypes.CDLL(sorted(paths)[0])


def main() -> None:
    """Print the table on rank 0."""
    p = pair()
    lib = libnccl()
    p.say("NCCL", nccl.get_version())
    raw = ctypes.c_void_p(p.nc.comm)

    def nalloc(n: int) -> int:
        ptr = ctypes.c_void_p()
        rc = lib.ncclMemAlloc(ctypes.byref(ptr), ctypes.c_size_t(n))
        assert rc == 0, f"ncclMemAlloc {rc}"
        return ptr.value

    def register(ptr: int, n: int) -> ctypes.c_void_p:
        h = ctypes.c_void_p()
        rc = lib.ncclCommRegister(raw, ctypes.c_void_p(ptr), ctypes.c_size_t(n), ctypes.byref(h))
        assert rc == 0, f"ncclCommRegister {rc}"
        return h

    for total in (2 << 30, 4 << 30):
        a = cp.ones(total // 8, cp.float64)
        beside = (a, cp.empty_like(a))
        cs, cr = cp.ones(total, cp.uint8), cp.empty(total, cp.uint8)
        ns, nr = nalloc(total), nalloc(total)
        cases = [("cupy", cs.data.ptr, cr.data.ptr), ("ncclMemAlloc", ns, nr)]
        handles = []
        for name, sp, rp in cases + [("registered", ns, nr)]:
            if name == "registered":
                handles = [register(ns, total), register(nr, total)]
                p.comm.Barrier()
            for groups in (1, 8):
                for copy in (False, True):
                    t = p.timed(sp, rp, total, groups, beside=beside if copy else None)
                    p.say(f"{total >> 20:5d} MiB, {name:12s}, {groups} groups, beside copy {copy!s:5}: {t:7.3f} ms")
        for h in handles:
            lib.ncclCommDeregister(raw, h)
        lib.ncclMemFree(ctypes.c_void_p(ns))
        lib.ncclMemFree(ctypes.c_void_p(nr))
        del a, beside, cs, cr


if __name__ == "__main__":
    main()
