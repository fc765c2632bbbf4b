"""NCCL send/recv between two GPUs: one large message per group against many run-sized ones.

Run with two ranks, one GPU each: ``mpirun -np 2 python3 bench/probes/nccl_runs.py``.
A transpose chunk that is dense in the receiver's output only run by run (X→Y: one run of
``nx/2 * ny/2`` cells per z-plane) could land there without unpacking if each run were its
own NCCL message. This prints, for 2 GiB and 4 GiB per rank in 8 groups, the exchange time
with messages of the whole group's size and of 1-8 MiB, alone and beside a copy kernel on
half the SMs (what packing beside NCCL looks like).
"""

from __future__ import annotations

import cupy as cp
import numpy as np
from cupy.cuda import nccl
from mpi4py import MPI

COPY = r"""
extern "C" __global__ void cp16(const ulonglong2* __restrict__ s, ulonglong2* __restrict__ d, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) d[i] = s[i];
}"""


def main() -> None:
    """Print the table on rank 0."""
    comm = MPI.COMM_WORLD
    cp.cuda.Device(comm.rank).use()
    uid = comm.bcast(nccl.get_unique_id() if comm.rank == 0 else None)
    nc = nccl.NcclCommunicator(comm.size, uid, comm.rank)
    peer = 1 - comm.rank
    say = print if comm.rank == 0 else (lambda *_: None)
    kernel = cp.RawKernel(COPY, "cp16")
    hi = cp.cuda.Stream(non_blocking=True)
    lo = cp.cuda.Stream(non_blocking=True)
    for total in (2 << 30, 4 << 30):
        sb = cp.ones(total, cp.uint8)
        rb = cp.empty(total, cp.uint8)
        a = cp.ones(total // 8, cp.float64)
        b = cp.empty_like(a)
        groups = 8
        step = total // groups
        for msg in (step, 8 << 20, 4 << 20, 2 << 20, 1 << 20):
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
                        for off in range(g * step, (g + 1) * step, msg):
                            nc.recv(rb.data.ptr + off, msg, nccl.NCCL_INT8, peer, hi.ptr)
                            nc.send(sb.data.ptr + off, msg, nccl.NCCL_INT8, peer, hi.ptr)
                        nccl.groupEnd()
                    e1.record(hi)
                    cp.cuda.Device().synchronize()
                    times.append(cp.cuda.get_elapsed_time(e0, e1))
                t = comm.allreduce(float(np.median(times[1:])), op=MPI.MAX)
                say(f"{total >> 20:5d} MiB, {groups} groups, messages of {msg >> 10:7d} KiB, beside copy {beside!s:5}: {t:7.3f} ms")
        del sb, rb, a, b


if __name__ == "__main__":
    main()
