"""Shared set-up and timing of the two-GPU NCCL probes (imported by them, not run)."""

from __future__ import annotations

from dataclasses import dataclass

import cupy as cp
import numpy as np
from cupy.cuda import nccl
from mpi4py import MPI

COPY = r"""
extern "C" __global__ void cp16(const ulonglong2* __restrict__ s, ulonglong2* __restrict__ d, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) d[i] = s[i];
}"""


@dataclass
class Pair:
    """Two ranks, one GPU each, an NCCL communicator and the streams the probes use."""

    comm: MPI.Comm
    nc: nccl.NcclCommunicator
    peer: int
    hi: cp.cuda.Stream
    lo: cp.cuda.Stream
    kernel: cp.RawKernel

    def say(self, *args: object) -> None:
        """Print on rank 0 only."""
        if self.comm.rank == 0:
            print(*args)

    def timed(
        self,
        send: int,
        recv: int,
        total: int,
        groups: int,
        msg: int | None = None,
        beside: tuple[cp.ndarray, cp.ndarray] | None = None,
    ) -> float:
        """Return the slowest rank's median time in ms (six runs, the first dropped).

        What is timed is :meth:`exchange` with these arguments on ``hi``, optionally beside
        a copy kernel from ``beside[0]`` to ``beside[1]`` on ``lo`` using half the SMs.
        """
        times = []
        for _ in range(6):
            self.comm.Barrier()
            cp.cuda.Device().synchronize()
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(self.hi)
            if beside is not None:
                a, b = beside
                with self.lo:
                    self.kernel((66,), (1024,), (a, b, np.int64(a.nbytes // 16)))
            self.exchange(send, recv, total, groups, msg)
            e1.record(self.hi)
            cp.cuda.Device().synchronize()
            times.append(cp.cuda.get_elapsed_time(e0, e1))
        return self.comm.allreduce(float(np.median(times[1:])), op=MPI.MAX)

    def exchange(self, send: int, recv: int, total: int, groups: int, msg: int | None = None) -> None:
        """Enqueue ``total`` bytes each way in ``groups`` NCCL groups.

        Each group holds messages of ``msg`` bytes (default: one message per group).
        """
        step = total // groups
        msg = msg or step
        for g in range(groups):
            nccl.groupStart()
            for off in range(g * step, (g + 1) * step, msg):
                self.nc.recv(recv + off, msg, nccl.NCCL_INT8, self.peer, self.hi.ptr)
                self.nc.send(send + off, msg, nccl.NCCL_INT8, self.peer, self.hi.ptr)
            nccl.groupEnd()


def pair() -> Pair:
    """Bind this rank's GPU and create the communicator (collective)."""
    comm = MPI.COMM_WORLD
    cp.cuda.Device(comm.rank).use()
    uid = comm.bcast(nccl.get_unique_id() if comm.rank == 0 else None)
    nc = nccl.NcclCommunicator(comm.size, uid, comm.rank)
    streams = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    return Pair(comm, nc, 1 - comm.rank, *streams, cp.RawKernel(COPY, "cp16"))
