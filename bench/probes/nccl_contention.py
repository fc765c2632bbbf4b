"""NCCL send/recv between two GPUs beside other work: what slicing and packing cost.

Run with two ranks, one GPU each: ``mpirun -np 2 python3 bench/probes/nccl_contention.py``.
Prints, for exchanges of 4 GiB, 2 GiB and 512 MiB per rank, the time of the exchange cut
into 1-16 NCCL groups alone and beside four copies of the same size, then of 4 GiB and
2 GiB exchanges beside a copy kernel of three times the bytes capped at G blocks.
"""

from __future__ import annotations

import cupy as cp
import numpy as np
from cupy.cuda import nccl
from mpi4py import MPI
from nccl_pair import COPY


class Probe:
    """One exchange size between this rank and its peer, on a high-priority stream."""

    def __init__(self, comm: MPI.Comm, nc: nccl.NcclCommunicator, total: int) -> None:
        self.comm, self.nc, self.total = comm, nc, total
        self.peer = 1 - comm.rank
        self.sb = cp.ones(total, cp.uint8)
        self.rb = cp.empty(total, cp.uint8)
        self.a = cp.ones(3 * total // 8, cp.float64)
        self.b = cp.empty_like(self.a)
        self.hi = cp.cuda.Stream(non_blocking=True, priority=-5)
        self.lo = cp.cuda.Stream(non_blocking=True)
        self.kernel = cp.RawKernel(COPY, "cp16")

    def exchange(self, groups: int) -> None:
        """Enqueue the exchange as ``groups`` NCCL groups of equal size."""
        step = self.total // groups
        for i in range(groups):
            nccl.groupStart()
            self.nc.send(self.sb.data.ptr + i * step, step, nccl.NCCL_INT8, self.peer, self.hi.ptr)
            self.nc.recv(self.rb.data.ptr + i * step, step, nccl.NCCL_INT8, self.peer, self.hi.ptr)
            nccl.groupEnd()

    def timed(self, groups: int, blocks: int | None) -> tuple[float, float]:
        """Time the exchange and the copy beside it, in ms.

        ``blocks`` None: four CuPy copies of the exchange's size; 0: no copy; else the kernel
        copying three times the bytes on that many blocks.
        """
        self.comm.Barrier()
        cp.cuda.Device().synchronize()
        e = [cp.cuda.Event() for _ in range(4)]
        e[0].record(self.hi)
        e[2].record(self.lo)
        with self.lo:
            if blocks is None:
                for _ in range(4):
                    self.b[: self.total // 8] = self.a[: self.total // 8]
            elif blocks > 0:
                self.kernel((blocks,), (256,), (self.a, self.b, np.int64(self.a.nbytes // 16)))
        e[3].record(self.lo)
        self.exchange(groups)
        e[1].record(self.hi)
        cp.cuda.Device().synchronize()
        return cp.cuda.get_elapsed_time(e[0], e[1]), cp.cuda.get_elapsed_time(e[2], e[3])

    def median(self, groups: int, blocks: int | None) -> tuple[float, float]:
        """Return the slowest rank's medians over five runs after one warm-up."""
        runs = [self.timed(groups, blocks) for _ in range(6)][1:]
        t = self.comm.allreduce(float(np.median([r[0] for r in runs])), op=MPI.MAX)
        u = self.comm.allreduce(float(np.median([r[1] for r in runs])), op=MPI.MAX)
        return t, u


def main() -> None:
    """Run both probes and print their tables on rank 0."""
    comm = MPI.COMM_WORLD
    cp.cuda.Device(comm.rank).use()
    uid = comm.bcast(nccl.get_unique_id() if comm.rank == 0 else None)
    nc = nccl.NcclCommunicator(comm.size, uid, comm.rank)
    say = print if comm.rank == 0 else (lambda *_: None)
    for total in (4 << 30, 2 << 30, 512 << 20):
        p = Probe(comm, nc, total)
        for groups in (1, 2, 4, 8, 16):
            for blocks in (0, None):
                t, _ = p.median(groups, blocks)
                say(f"{total >> 20:5d} MiB in {groups:2d} groups, beside copies {blocks is None!s:5}: {t:7.3f} ms")
        if total >= 2 << 30:
            groups = 8 if total == 4 << 30 else 4
            for blocks in (16, 32, 48, 66, 100, 132, 264, 1056, 1 << 16):
                t, u = p.median(groups, blocks)
                copy = f"a {3 * total >> 20} MiB copy on {blocks:6d} blocks"
                say(f"{total >> 20:5d} MiB in {groups} groups beside {copy}: {t:7.3f} ms (copy {u:7.3f} ms)")
        del p


if __name__ == "__main__":
    main()
