"""Timing: the array backend, the median-of-ranks timer, the copy ceilings and the rows they make."""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
from mpi4py import MPI

import cudecomp

from ._common import Row, pct_of

_T = TypeVar("_T")


class Xp:
    """Array backend of the loaded variant: NumPy (CPU) or CuPy (GPU)."""

    def __init__(self) -> None:
        self.gpu = not cudecomp.CPU_ONLY
        if self.gpu:
            import cupy

            self.m: Any = cupy
            n = cupy.cuda.runtime.getDeviceCount()
            local = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
            cupy.cuda.Device(local.rank % n).use()
            self.ngpus, self.local_size = n, local.size
            local.Free()
        else:
            self.m = np
            self.ngpus, self.local_size = 0, 1
        #: Every rank of the job drives a GPU of its own (decided together: NCCL baselines
        #: and backends are collective choices).
        self.own_gpus = MPI.COMM_WORLD.allreduce(self.gpu and self.local_size <= self.ngpus, op=MPI.LAND)

    def sync(self) -> None:
        """Wait for the current stream (GPU); nothing on CPU."""
        if self.gpu:
            self.m.cuda.get_current_stream().synchronize()

    def host(self, a: Any) -> np.ndarray:
        """Return ``a`` as a NumPy array (a copy to the host on GPU)."""
        return self.m.asnumpy(a) if self.gpu else a

    def timer(self) -> Callable[[Callable[[], object]], float]:
        """Return a function timing one call in seconds (events on GPU, wall clock on CPU)."""
        if self.gpu:
            start, end = self.m.cuda.Event(), self.m.cuda.Event()

            def gpu_time(fn: Callable[[], object]) -> float:
                start.record()
                fn()
                end.record()
                end.synchronize()
                return float(self.m.cuda.get_elapsed_time(start, end)) / 1e3

            return gpu_time

        def cpu_time(fn: Callable[[], object]) -> float:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0

        return cpu_time


def measure(xp: Xp, comm: MPI.Comm, fn: Callable[[], object], warmup: int, reps: int) -> tuple[float, float]:
    """(median, min) seconds of ``fn``: median per rank, then the slowest rank."""
    return measure_in_turn(xp, comm, [fn], warmup, reps)[0]


def measure_in_turn(xp: Xp, comm: MPI.Comm, fns: Sequence[Callable[[], object]], warmup: int, reps: int) -> list[tuple[float, float]]:
    """(median, min) seconds of each of ``fns``, timed in turn within every repetition (collective).

    Timed in turn, the functions see the same state of the machine (clock, caches, the
    other processes' load), so their ratios hold on a machine whose speed drifts during
    the run, where timing one after the other would compare different moments. The
    repetitions go through every order of the functions in turn: a call is faster or
    slower by what ran just before it (on 2 CPU ranks, an exchange after three smaller
    ones is faster than after one of its own size), and in one fixed order that would
    favour one function throughout.
    """
    for _ in range(warmup):
        for fn in fns:
            fn()
    xp.sync()
    timer = xp.timer()
    times: list[list[float]] = [[] for _ in fns]
    orders = itertools.cycle(itertools.permutations(range(len(fns))))
    for _ in range(reps):
        for i in next(orders):
            comm.Barrier()
            times[i].append(timer(fns[i]))
    return [(comm.allreduce(float(np.median(t)), op=MPI.MAX), comm.allreduce(min(t), op=MPI.MAX)) for t in times]


def on_root(comm: MPI.Comm, fn: Callable[[], _T]) -> _T:
    """Run ``fn`` on rank 0 alone and return its result on every rank (collective).

    An exception on rank 0 is raised there and, as a ``RuntimeError`` naming it, on the
    other ranks rather than leaving them waiting. They wait without spinning, so that on
    a CPU with fewer cores than ranks they leave rank 0 its core.
    """
    result: Any = None
    error: BaseException | None = None
    if comm.rank == 0:
        try:
            result = fn()
        except Exception as e:
            error = e
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.002)
    result, why = comm.bcast((result, f"{type(error).__name__}: {error}" if error else ""), root=0)
    if error is not None:
        raise error
    if why:
        raise RuntimeError(f"rank 0 failed: {why}")
    return result  # type: ignore[no-any-return]


def ceilings(xp: Xp, comm: MPI.Comm) -> dict[str, float]:
    """Same-run copy bandwidths in GB/s (bytes copied / time), the ceilings of distributed operations.

    Measured once, by rank 0 alone, with large buffers (1 GiB on GPU, 256 MiB on CPU):
    ``device_copy`` or ``host_copy``, and ``peer_copy`` (GPU to GPU) where rank 0 sees
    two GPUs or more. Collective; the same dict on every rank.
    """
    nbytes = 1 << 30 if xp.gpu else 1 << 28

    def measure_on_root() -> dict[str, float]:
        out: dict[str, float] = {}
        m = xp.m
        a = m.ones(nbytes // 8, dtype=np.float64)
        b = m.empty_like(a)
        timer = xp.timer()
        for _ in range(3):
            m.copyto(b, a)
        xp.sync()
        t = float(np.median([timer(functools.partial(m.copyto, b, a)) for _ in range(10)]))
        out["device_copy" if xp.gpu else "host_copy"] = nbytes / t / 1e9
        rt = m.cuda.runtime if xp.gpu else None
        me = m.cuda.Device().id if xp.gpu else 0
        other = (me + 1) % max(xp.ngpus, 1)
        # Without peer access a peer copy is staged through the host: no peer ceiling then.
        if rt is not None and xp.ngpus >= 2 and rt.deviceCanAccessPeer(me, other):
            with m.cuda.Device(other):
                c = m.empty_like(a)
            try:
                rt.deviceEnablePeerAccess(other)
            except rt.CUDARuntimeError as e:
                if "already" not in str(e).lower():
                    raise
            peer = functools.partial(rt.memcpyPeerAsync, c.data.ptr, other, a.data.ptr, me, nbytes, m.cuda.get_current_stream().ptr)
            for _ in range(3):
                peer()
            xp.sync()
            out["peer_copy"] = nbytes / float(np.median([timer(peer) for _ in range(10)])) / 1e9
            del c
        del a, b
        return out

    return on_root(comm, measure_on_root)


def boxes(info: cudecomp.PencilInfo) -> tuple[list[int], list[int]]:
    """(lo, hi exclusive) of a pencil's interior in global axis order."""
    lo, hi = [0] * 3, [0] * 3
    for p in range(3):
        lo[info.order[p]] = info.lo[p]
        hi[info.order[p]] = info.hi[p] + 1
    return lo, hi


def off_rank_bytes(grid: cudecomp.GridDesc, a: int, b: int, itemsize: int) -> int:
    """Bytes of a transpose's input that leave this rank."""
    (il, ih), (ol, oh) = boxes(grid.get_pencil_info(a)), boxes(grid.get_pencil_info(b))
    stay = math.prod(max(0, min(ih[g], oh[g]) - max(il[g], ol[g])) for g in range(3))
    return (math.prod(ih[g] - il[g] for g in range(3)) - stay) * itemsize


class Ceilings:
    """The ceilings rows are compared with (GB/s, bytes copied / time).

    ``run_wide`` is measured once, on rank 0 alone, with large buffers
    (``ceilings``); it bounds distributed operations when the run is on one node
    (``single_node``: as the package sees nodes, ``Handle.one_node()``).
    Local operations are compared with a copy of the same bytes on every rank at once
    (``local``), measured per distinct set of per-rank sizes and cached; not where
    ranks share a GPU, whose processes' copy kernels take turns on it (time-sliced) while
    the library's copies may run on separate copy engines, so that no copy of theirs is
    a ceiling.
    """

    def __init__(self, xp: Xp, comm: MPI.Comm, warmup: int, reps: int, single_node: bool) -> None:
        self.xp, self.comm, self.warmup, self.reps = xp, comm, warmup, reps
        self.run_wide = ceilings(xp, comm)
        if not single_node:
            self.exchange_name = ""  # bytes may cross the network, which is not measured
        elif xp.gpu:
            self.exchange_name = "peer_copy" if "peer_copy" in self.run_wide else "device_copy"
        else:
            self.exchange_name = "host_copy"
        self.local_name = "" if xp.gpu and not xp.own_gpus else "device_copy_same_data" if xp.gpu else "host_copy_same_data"
        self._same: dict[tuple[int, ...], float] = {}

    def exchange(self) -> tuple[str, float]:
        """(name, GB/s) of the ceiling of distributed operations; ("", NaN) when none applies."""
        if not self.exchange_name:
            return "", math.nan
        return self.exchange_name, self.run_wide.get(self.exchange_name, math.nan)

    def local(self, nbytes: int) -> tuple[str, float]:
        """(name, GB/s) of copying ``nbytes`` (this rank's share) on every rank at once; ("", NaN) where none applies.

        Collective. GB/s is the mean bytes over ranks over the slowest rank's median time,
        the same way the operations' bandwidth is computed.
        """
        if not self.local_name:
            return "", math.nan
        sizes = tuple(self.comm.allgather(int(nbytes)))
        if sizes not in self._same:
            m = self.xp.m
            share = self._copy_share(int(nbytes))
            src = m.ones(max(int(nbytes) // share, 1), dtype=np.uint8)
            dst = m.zeros_like(src)
            med, _ = measure(self.xp, self.comm, lambda: m.copyto(dst, src), self.warmup, self.reps)
            mean = sum(sizes) / len(sizes) / share
            self._same[sizes] = mean / med / 1e9 if med > 0 and mean > 0 else math.nan
            del src, dst
        return self.local_name, self._same[sizes]

    def _copy_share(self, nbytes: int) -> int:
        """Return N such that 1/N of ``nbytes`` (agreed on every rank) fits twice beside the arrays in use (collective).

        Copying the same bytes needs two more arrays of their size; where the device cannot
        hold them (a 1024^3 complex128 pencil beside its transpose's two pencils), a half, a
        quarter, ... is copied: from 1 GiB up, a copy runs at the same bandwidth whatever
        its size.
        """
        share = 1
        while True:
            try:
                probe = [self.xp.m.empty(max(nbytes // share, 1), dtype=np.uint8) for _ in range(2)]
                settled = True
                del probe
            except MemoryError:
                settled = nbytes // share < 2**30  # no smaller part is worth copying: the copy raises
            pool = getattr(self.xp.m, "get_default_memory_pool", None)
            if pool is not None:
                pool().free_all_blocks()
            if self.comm.allreduce(settled, op=MPI.LAND):
                return share
            share *= 2


class CopyFloor:
    """``--floor``: every rank copying its own pencil once, all ranks at once (what no transpose of it can beat).

    A distributed transpose moves every cell of the input pencil once into the output; the
    same copy within each rank, with cudecomp's own copy (an X->Y transpose of a 1x1 grid
    of a handle on ``MPI.COMM_SELF``: one dense copy) and at the same time on every rank so
    that memory bandwidth is shared alike, bounds it from below. Measured per distinct set
    of per-rank shapes and cached.
    """

    def __init__(self) -> None:
        self.handle: cudecomp.Handle | None = None
        self._ms: dict[tuple[Any, ...], float] = {}

    def ms(self, s: Session, shape: tuple[int, ...], dtype: Any) -> float:
        """Milliseconds of the floor for this rank's input pencil ``shape`` (collective over ``s.comm``)."""
        key = tuple(s.comm.allgather((tuple(int(n) for n in shape), np.dtype(dtype).str)))
        if key not in self._ms:
            if self.handle is None:
                self.handle = cudecomp.Handle(MPI.COMM_SELF)
            cfg = cudecomp.GridDescConfig()
            cfg.gdims, cfg.pdims = tuple(int(n) for n in reversed(shape)), (1, 1)
            with self.handle.create_grid(cfg) as grid:
                src = s.xp.m.ones(grid.get_pencil_info(0).array_shape, dtype)
                dst = s.xp.m.zeros(grid.get_pencil_info(1).array_shape, dtype)
                med, _ = s.time(functools.partial(grid.transpose_x_to_y, src, dst))
                del src, dst
            self._ms[key] = med * 1e3
        return self._ms[key]

    def close(self) -> None:
        """Finalize the handle of the floor's grids."""
        if self.handle is not None:
            self.handle.finalize()
            self.handle = None


def mean_gbps(comm: MPI.Comm, nbytes: int, seconds: float) -> float:
    """Mean over ranks of ``nbytes / seconds`` in GB/s (collective)."""
    return comm.allreduce(nbytes / seconds / 1e9, op=MPI.SUM) / comm.size


@dataclass(frozen=True)
class Session:
    """What every measurement of one run shares: its options, communicator, array backend, handle, ceilings and copy floor."""

    args: argparse.Namespace
    comm: MPI.Comm
    xp: Xp
    handle: cudecomp.Handle
    ceils: Ceilings
    floor: CopyFloor | None = None

    def time(self, fn: Callable[[], object]) -> tuple[float, float]:
        """(median, min) seconds of ``fn`` after the run's warm-up, over its repetitions (collective)."""
        return measure(self.xp, self.comm, fn, self.args.warmup, self.args.reps)

    def time_in_turn(self, *fns: Callable[[], object]) -> list[tuple[float, float]]:
        """(median, min) seconds of each of ``fns``, timed in turn within each repetition (collective)."""
        return measure_in_turn(self.xp, self.comm, fns, self.args.warmup, self.args.reps)

    def measured_row(self, ident: Row, med: float, mn: float, off: int, local_bytes: int, distributed: bool) -> Row:
        """Fill ``ident`` (a row naming the configuration) with its timings and bandwidth (collective).

        Distributed operations count the ``off`` bytes that leave the rank against the
        exchange ceiling; local ones count ``local_bytes`` against a copy of the same bytes.
        """
        comm = self.comm
        moved = off if distributed else local_bytes
        cname, ceiling = self.ceils.exchange() if distributed else self.ceils.local(moved)
        gbps = mean_gbps(comm, moved, med)
        return replace(
            ident,
            ms=med * 1e3,
            ms_min=mn * 1e3,
            gbps_per_rank=gbps,
            bytes_off_rank=comm.allreduce(off, op=MPI.MAX),
            ceiling_gbps=ceiling,
            pct_of_ceiling=pct_of(gbps, ceiling),
            distributed=distributed,
            ceiling=cname,
            bytes_per_rank=comm.allreduce(moved, op=MPI.MAX),
        )
