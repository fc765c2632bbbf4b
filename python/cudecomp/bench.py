"""Benchmark CLI: ``mpiexec -n N python -m cudecomp.bench [options]``.

Sweeps grids, process grids, backends, dtypes and layouts; times the four transposes and
halo updates (warm-up, then >= 10 timed repetitions; CUDA events on GPU, wall clock on
CPU; the median per rank, then the slowest rank); and reports, per row, the achieved
bandwidth per rank next to a same-run ceiling, and for distributed X->Y rows the same-run
peer baselines on the same data.

Distributed operations (bytes leave the rank) count the bytes that leave the rank and are
compared with the copy bandwidth between the places those bytes go: peer copy between
GPUs, else device memory copy (ranks sharing a GPU) or host memory copy (CPU), measured
once per run on one node; a run spanning several nodes reports no percentage for them
(the network is not measured). Local operations (a process grid dimension of 1 along the
exchange: nothing leaves the rank) count the bytes of their input and are compared with a
device or host memory copy of the same bytes (read and written once), timed on every rank
at once like the operation itself, so that caches and shared memory bandwidth weigh alike.

Peer baselines (X->Y, default layout, only where X->Y is distributed): on GPU a raw NCCL
all-to-all of the same bytes and the straightforward CuPy pack -> all-to-all -> unpack a
user would write (NCCL when every rank has its own GPU, host-staged MPI otherwise); on CPU
the MPI ``Alltoallw`` of subarray datatypes that mpi4py-fft's pencil ``Transfer``
performs, and NumPy pack -> ``Alltoallv`` -> unpack. ``--ops fft`` times a
``cudecomp.fft`` plan's forward and backward transform beside the same transform of the
whole array on one device (rank 0), measured in the same run. ``--graph N`` (GPU) adds
rows ``op-graph``: N operations captured into one CUDA graph, the replay's wall clock per
operation beside N eager calls'. Writes JSON and CSV; ``--plot DIR``
(needs matplotlib) renders heatmaps (backend x process grid) and bandwidth-versus-size
small multiples. Progress (``--progress``): by default a tqdm bar, only when stderr is a
terminal and tqdm is installed.
"""

from __future__ import annotations

import argparse
import csv
import functools
import importlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, TextIO

import numpy as np
from mpi4py import MPI

import cudecomp
from cudecomp import DataType, HaloCommBackend, TransposeCommBackend

__all__ = ["main"]

DTYPES = {"f32": DataType.FLOAT, "f64": DataType.DOUBLE, "c64": DataType.FLOAT_COMPLEX, "c128": DataType.DOUBLE_COMPLEX}
NP_DTYPES = {
    DataType.FLOAT: np.float32,
    DataType.DOUBLE: np.float64,
    DataType.FLOAT_COMPLEX: np.complex64,
    DataType.DOUBLE_COMPLEX: np.complex128,
}
MPI_TYPES = {
    DataType.FLOAT: MPI.FLOAT,
    DataType.DOUBLE: MPI.DOUBLE,
    DataType.FLOAT_COMPLEX: MPI.C_FLOAT_COMPLEX,
    DataType.DOUBLE_COMPLEX: MPI.C_DOUBLE_COMPLEX,
}
OPS = {
    "xy": ("transpose_x_to_y", 0, 1),
    "yz": ("transpose_y_to_z", 1, 2),
    "zy": ("transpose_z_to_y", 2, 1),
    "yx": ("transpose_y_to_x", 1, 0),
}
HALO_OPS = ("halo", "hx", "hy", "hz")
#: ``--ops fft`` times a cudecomp.fft plan: rows ``fft`` (forward) and ``ifft`` (backward).
FFT_OPS = ("fft", "ifft")
OP_TITLES = {
    "xy": "X→Y",
    "yz": "Y→Z",
    "zy": "Z→Y",
    "yx": "Y→X",
    "halo": "halo x,y,z",
    "hx": "halo x",
    "hy": "halo y",
    "hz": "halo z",
    "fft": "forward FFT",
    "ifft": "backward FFT",
}
#: Short names of the ceilings in the printed table.
CEILING_TAGS = {
    "peer_copy": "peer",
    "device_copy": "dev",
    "host_copy": "host",
    "device_copy_same_data": "dev-same",
    "host_copy_same_data": "host-same",
}


@dataclass
class Row:
    """One measured configuration.

    ``gbps_per_rank`` counts, per rank, the bytes that leave the rank (distributed
    operations) or the bytes of the data copied (local ones), over the slowest rank's
    median time, averaged over ranks; ``pct_of_ceiling`` compares it with the ceiling
    named by ``ceiling`` (NaN where none applies). Fields are only ever added (at the
    end), never removed, so that older JSON and CSV readers keep working.
    """

    op: str
    gdims: tuple[int, int, int]
    pdims: tuple[int, int]
    backend: str
    dtype: str
    axis_contiguous: bool
    halo: tuple[int, int, int] = (0, 0, 0)
    ms: float = math.nan
    ms_min: float = math.nan
    gbps_per_rank: float = math.nan
    bytes_off_rank: int = 0
    ceiling_gbps: float = math.nan
    pct_of_ceiling: float = math.nan
    baseline: dict[str, float] = field(default_factory=dict)
    note: str = ""
    #: True when bytes leave some rank (else a local copy, permutation or periodic wrap).
    distributed: bool = False
    #: Which ceiling ``ceiling_gbps`` is: ``peer_copy``, ``device_copy``, ``host_copy``
    #: (run-wide, distributed operations), ``device_copy_same_data`` or
    #: ``host_copy_same_data`` (local operations), or "" (none applies).
    ceiling: str = ""
    #: Bytes per rank that ``gbps_per_rank`` counts (the most of any rank).
    bytes_per_rank: int = 0


def pct_of(gbps: float, ceiling: float) -> float:
    """``gbps`` as a percentage of ``ceiling``; NaN when the ceiling is unknown."""
    if not (math.isfinite(ceiling) and ceiling > 0 and math.isfinite(gbps)):
        return math.nan
    return 100 * gbps / ceiling


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
    for _ in range(warmup):
        fn()
    xp.sync()
    timer = xp.timer()
    times = []
    for _ in range(reps):
        comm.Barrier()
        times.append(timer(fn))
    med = float(np.median(times))
    return comm.allreduce(med, op=MPI.MAX), comm.allreduce(min(times), op=MPI.MAX)


def ceilings(xp: Xp, comm: MPI.Comm) -> dict[str, float]:
    """Same-run copy bandwidths in GB/s (bytes copied / time), the ceilings of distributed operations.

    Measured once, by rank 0 alone, with large buffers (1 GiB on GPU, 256 MiB on CPU):
    ``device_copy`` or ``host_copy``, and ``peer_copy`` (GPU to GPU) where rank 0 sees
    two GPUs or more. Collective; the same dict on every rank.
    """
    out: dict[str, float] = {}
    nbytes = 1 << 30 if xp.gpu else 1 << 28
    if comm.rank == 0:
        m = xp.m
        a = m.ones(nbytes // 8, dtype=np.float64)
        b = m.empty_like(a)
        timer = xp.timer()
        for _ in range(3):
            m.copyto(b, a)
        xp.sync()
        t = float(np.median([timer(lambda: m.copyto(b, a)) for _ in range(10)]))
        out["device_copy" if xp.gpu else "host_copy"] = nbytes / t / 1e9
        if xp.gpu and xp.ngpus >= 2:
            rt = m.cuda.runtime
            me = m.cuda.Device().id
            other = (me + 1) % xp.ngpus
            with m.cuda.Device(other):
                c = m.empty_like(a)
            try:
                rt.deviceEnablePeerAccess(other)
            except Exception:
                pass
            stream = m.cuda.get_current_stream()

            def peer() -> None:
                rt.memcpyPeerAsync(c.data.ptr, other, a.data.ptr, me, nbytes, stream.ptr)

            for _ in range(3):
                peer()
            xp.sync()
            out["peer_copy"] = nbytes / float(np.median([timer(peer) for _ in range(10)])) / 1e9
            del c
        del a, b
    return comm.bcast(out, root=0)


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


class XYBaselines:
    """User-written X->Y transposes of the same data (default layout), for comparison."""

    def __init__(self, xp: Xp, comm: MPI.Comm, grid: cudecomp.GridDesc, dtype: DataType) -> None:
        self.xp, self.dtype = xp, dtype
        ia, ib = grid.get_pencil_info(0), grid.get_pencil_info(1)
        self.x = xp.m.ones(ia.array_shape, NP_DTYPES[dtype])
        self.y = xp.m.zeros(ib.array_shape, NP_DTYPES[dtype])
        (al, ah), (bl, bh) = boxes(ia), boxes(ib)
        self.col = comm.Split(al[2], comm.rank)  # ranks sharing the Z range exchange X<->Y
        peers = self.col.allgather((bl[0], bh[0], al[1], ah[1]))
        self.xr = [(p[0], p[1]) for p in peers]  # X range each peer owns in Y-pencils
        self.yr = [(p[2], p[3]) for p in peers]  # Y range each peer owns in X-pencils
        zl, yl, xl = ia.array_shape[0], ah[1] - al[1], bh[0] - bl[0]
        self.send_counts = [zl * yl * (x1 - x0) for x0, x1 in self.xr]
        self.recv_counts = [zl * (y1 - y0) * xl for y0, y1 in self.yr]
        self.sdispl = np.concatenate([[0], np.cumsum(self.send_counts)[:-1]]).astype(int)
        self.rdispl = np.concatenate([[0], np.cumsum(self.recv_counts)[:-1]]).astype(int)
        self.sbuf = xp.m.empty(sum(self.send_counts), NP_DTYPES[dtype])
        self.rbuf = xp.m.empty(sum(self.recv_counts), NP_DTYPES[dtype])
        self.nccl: Any = None
        if xp.gpu and xp.local_size <= xp.ngpus:
            from cupy.cuda import nccl

            uid = self.col.bcast(nccl.get_unique_id() if self.col.rank == 0 else None)
            self.nccl = nccl.NcclCommunicator(self.col.size, uid, self.col.rank)

    def pack(self) -> None:
        """Copy each peer's X-pencil part into the contiguous send buffer."""
        for j, (x0, x1) in enumerate(self.xr):
            n = self.send_counts[j]
            self.sbuf[self.sdispl[j] : self.sdispl[j] + n].reshape(self.x.shape[0], self.x.shape[1], x1 - x0)[...] = self.x[:, :, x0:x1]

    def unpack(self) -> None:
        """Copy each peer's received part into the Y-pencil."""
        for j, (y0, y1) in enumerate(self.yr):
            n = self.recv_counts[j]
            self.y[:, y0:y1, :] = self.rbuf[self.rdispl[j] : self.rdispl[j] + n].reshape(self.y.shape[0], y1 - y0, self.y.shape[2])

    def exchange(self) -> None:
        """All-to-all of the packed buffers (NCCL, host-staged MPI or MPI ``Alltoallv``)."""
        isz = np.dtype(NP_DTYPES[self.dtype]).itemsize
        if self.nccl is not None:
            from cupy.cuda import nccl

            s = self.xp.m.cuda.get_current_stream().ptr
            nccl.groupStart()
            for j in range(self.col.size):
                self.nccl.send(self.sbuf.data.ptr + int(self.sdispl[j]) * isz, self.send_counts[j] * isz, nccl.NCCL_INT8, j, s)
                self.nccl.recv(self.rbuf.data.ptr + int(self.rdispl[j]) * isz, self.recv_counts[j] * isz, nccl.NCCL_INT8, j, s)
            nccl.groupEnd()
        elif self.xp.gpu:
            hs, hr = self.xp.host(self.sbuf), np.empty(self.rbuf.shape, self.rbuf.dtype)
            t = MPI_TYPES[self.dtype]
            self.col.Alltoallv([hs, (self.send_counts, self.sdispl), t], [hr, (self.recv_counts, self.rdispl), t])
            self.rbuf.set(hr)
        else:
            t = MPI_TYPES[self.dtype]
            self.col.Alltoallv([self.sbuf, (self.send_counts, self.sdispl), t], [self.rbuf, (self.recv_counts, self.rdispl), t])

    def pack_exchange_unpack(self) -> None:
        """Run the whole user-written transpose: pack, exchange, unpack."""
        self.pack()
        self.exchange()
        self.unpack()

    def alltoallw(self) -> Callable[[], None]:
        """mpi4py-fft's Transfer method: Alltoallw with subarray datatypes, no packing."""
        t = MPI_TYPES[self.dtype]
        x, y = self.x, self.y
        stypes = [t.Create_subarray(x.shape, (x.shape[0], x.shape[1], x1 - x0), (0, 0, x0)).Commit() for x0, x1 in self.xr]
        rtypes = [t.Create_subarray(y.shape, (y.shape[0], y1 - y0, y.shape[2]), (0, y0, 0)).Commit() for y0, y1 in self.yr]
        ones, zeros = [1] * self.col.size, [0] * self.col.size

        def run() -> None:
            self.col.Alltoallw([x, (ones, zeros), stypes], [y, (ones, zeros), rtypes])

        return run

    def measures(self, comm: MPI.Comm, warmup: int, reps: int) -> dict[str, float]:
        """Median milliseconds of each baseline, keyed ``<name>_ms``."""
        out: dict[str, float] = {}
        if self.nccl is not None:
            out["raw_nccl_alltoall_ms"] = measure(self.xp, comm, self.exchange, warmup, reps)[0] * 1e3
            out["cupy_pack_nccl_unpack_ms"] = measure(self.xp, comm, self.pack_exchange_unpack, warmup, reps)[0] * 1e3
        elif self.xp.gpu:
            out["cupy_pack_staged_mpi_unpack_ms"] = measure(self.xp, comm, self.pack_exchange_unpack, warmup, reps)[0] * 1e3
        else:
            out["mpi_alltoallw_subarray_ms"] = measure(self.xp, comm, self.alltoallw(), warmup, reps)[0] * 1e3
            out["numpy_pack_alltoallv_unpack_ms"] = measure(self.xp, comm, self.pack_exchange_unpack, warmup, reps)[0] * 1e3
        return out

    def close(self) -> None:
        """Free the communicators."""
        if self.nccl is not None:
            self.nccl.destroy()
        self.col.Free()


class Ceilings:
    """The ceilings rows are compared with (GB/s, bytes copied / time).

    ``run_wide`` is measured once, on rank 0 alone, with large buffers
    (:func:`ceilings`); it bounds distributed operations when the run is on one node
    (``single_node``: as the package sees nodes, ``Handle.one_node()``).
    Local operations are compared with a copy of the same bytes on every rank at once
    (:meth:`local`), measured per distinct set of per-rank sizes and cached.
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
        self.local_name = "device_copy_same_data" if xp.gpu else "host_copy_same_data"
        self._same: dict[tuple[int, ...], float] = {}

    def exchange(self) -> tuple[str, float]:
        """(name, GB/s) of the ceiling of distributed operations; ("", NaN) when none applies."""
        if not self.exchange_name:
            return "", math.nan
        return self.exchange_name, self.run_wide.get(self.exchange_name, math.nan)

    def local(self, nbytes: int) -> tuple[str, float]:
        """(name, GB/s) of copying ``nbytes`` (this rank's share) on every rank at once.

        Collective. GB/s is the mean bytes over ranks over the slowest rank's median time,
        the same way the operations' bandwidth is computed.
        """
        sizes = tuple(self.comm.allgather(int(nbytes)))
        if sizes not in self._same:
            m = self.xp.m
            src = m.ones(max(int(nbytes), 1), dtype=np.uint8)
            dst = m.zeros_like(src)
            med, _ = measure(self.xp, self.comm, lambda: m.copyto(dst, src), self.warmup, self.reps)
            mean = sum(sizes) / len(sizes)
            self._same[sizes] = mean / med / 1e9 if med > 0 and mean > 0 else math.nan
            del src, dst
        return self.local_name, self._same[sizes]


def parse_grid(s: str) -> tuple[int, int, int]:
    """Parse a global grid: ``256^3``, ``128,96,64``, ``128x96x64`` or ``64`` (a cube)."""
    try:
        if "^" in s:
            n = int(s.split("^")[0])
            v = [n, n, n]
        else:
            v = [int(t) for t in s.replace("x", ",").split(",")]
            v = v * 3 if len(v) == 1 else v
    except ValueError:
        v = []
    if len(v) != 3 or min(v) < 1:
        raise argparse.ArgumentTypeError(f"invalid grid {s!r}: expected N^3, NX,NY,NZ or NXxNYxNZ with positive sizes")
    return (v[0], v[1], v[2])


def parse_backends(s: str) -> str:
    """Validate ``--backends``: ``all`` or comma-separated TransposeCommBackend names."""
    if s != "all":
        bad = [b for b in s.split(",") if b not in TransposeCommBackend.__members__]
        if bad:
            names = ", ".join(TransposeCommBackend.__members__)
            raise argparse.ArgumentTypeError(f"unknown backend(s) {', '.join(bad)}; choose from {names}, or all")
    return s


def process_grids(spec: str, n: int) -> list[tuple[int, int]]:
    """Process grids of ``n`` ranks: ``all`` of them, or those of ``spec`` (``1x2,2x1``) whose product is ``n``."""
    if spec == "all":
        return [(r, n // r) for r in range(1, n + 1) if n % r == 0]
    out = []
    for s in spec.split(","):
        try:
            r, c = (int(v) for v in s.split("x"))
        except ValueError:
            continue
        if r * c == n:
            out.append((r, c))
    return out


def default_backends(xp: Xp) -> list[str]:
    """Transpose backends measured by ``--backends all`` (NCCL ones only with a GPU per rank)."""
    names = ["MPI_P2P", "MPI_P2P_PL", "MPI_A2A"]
    if xp.gpu and xp.local_size <= xp.ngpus:
        names = ["NCCL", "NCCL_PL"] + names
    return names + ["DIRECT"]


PROGRESS_MODES = ("auto", "bar", "lines", "off")


class Progress:
    """Progress over configurations, written to stderr by rank 0 only.

    Modes: ``auto`` (a tqdm bar when the stream is a terminal and tqdm is installed,
    else nothing, so that files and pipes get no carriage-return bars), ``bar`` (a tqdm
    bar wherever the stream goes, e.g. under ``mpiexec``, whose ranks write into pipes),
    ``lines`` (one plain line per configuration, for logs) and ``off``.
    """

    def __init__(self, total: int, mode: str, enabled: bool = True, stream: TextIO | None = None) -> None:
        if mode not in PROGRESS_MODES:
            raise ValueError(f"progress mode {mode!r}: expected one of {', '.join(PROGRESS_MODES)}")
        self.total, self.count = total, 0
        self.bar: Any = None
        self.stream: TextIO = sys.stderr if stream is None else stream
        self.mode = mode if enabled else "off"
        if self.mode == "auto":
            self.mode = "bar" if _isatty(self.stream) and tqdm_class() is not None else "off"
        if self.mode == "bar":
            tqdm = tqdm_class()
            if tqdm is None:
                raise RuntimeError("--progress bar needs tqdm, which is not installed (pip install tqdm)")
            self.bar = tqdm(total=total, file=self.stream, unit="config", dynamic_ncols=True)

    def start(self, desc: str) -> None:
        """Announce the next configuration, described by ``desc``."""
        self.count += 1
        if self.bar is not None:
            self.bar.set_postfix_str(desc)
        elif self.mode == "lines":
            self.stream.write(f"[{self.count}/{self.total}] {desc}\n")
            self.stream.flush()

    def done(self) -> None:
        """Count the configuration announced last as finished."""
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        """Finish the bar (if any)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def tqdm_class() -> Any:
    """Return ``tqdm.tqdm``, or None when tqdm is not installed."""
    try:
        return importlib.import_module("tqdm").tqdm
    except ImportError:
        return None


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def run(args: argparse.Namespace) -> list[Row]:
    """Measure every configuration of ``args`` (collective); the rows, the same on every rank."""
    comm = MPI.COMM_WORLD
    xp = Xp()  # selects this rank's GPU before the handle binds it
    handle = cudecomp.Handle(comm)
    ceils = Ceilings(xp, comm, args.warmup, args.reps, handle.one_node())
    backends = args.backends.split(",") if args.backends != "all" else default_backends(xp)
    rows: list[Row] = []
    grids = process_grids(args.pdims, comm.size)
    total = len(args.gdims) * len(args.dtypes) * len(args.axis_contiguous) * len(backends) * len(grids)
    progress = Progress(total, "off" if args.quiet else args.progress, enabled=comm.rank == 0)
    one_device: dict[tuple[Any, ...], dict[str, float]] = {}  # same-run single-device fftn, per grid and dtype
    try:
        if args.autotune:
            for gdims in args.gdims:
                rows += [autotune(handle, comm, gdims, d, bool(ac)) for d in args.dtypes for ac in args.axis_contiguous]
        for gdims in args.gdims:
            for pdims in grids:
                for dname in args.dtypes:
                    dtype = DTYPES[dname]
                    itemsize = cudecomp.get_data_type_size(dtype)
                    base: dict[str, float] = {}
                    if args.baselines and "xy" in args.ops:
                        base = xy_baselines(args, handle, xp, comm, gdims, pdims, dtype, itemsize)
                    for i, ac in enumerate(args.axis_contiguous):
                        for bname in backends:
                            g, p = "x".join(map(str, gdims)), "x".join(map(str, pdims))
                            progress.start(f"{g} {p} {dname} {bname} ac={ac}")
                            if any(op in OPS or op == "halo" for op in args.ops):
                                rows += run_config(
                                    args, handle, xp, comm, gdims, pdims, dtype, dname, bool(ac), bname, itemsize, base, ceils
                                )
                            if "fft" in args.ops and i == 0:  # the plan chooses its own layouts
                                rows += fft_rows(args, handle, xp, comm, gdims, pdims, dname, bname, one_device)
                            progress.done()
    finally:
        progress.close()
    handle.finalize()
    for r in rows:
        r.baseline = {**r.baseline, **{f"ceiling_{k}_gbps": v for k, v in ceils.run_wide.items()}}
    return rows


def xy_baselines(
    args: argparse.Namespace,
    handle: cudecomp.Handle,
    xp: Xp,
    comm: MPI.Comm,
    gdims: tuple[int, int, int],
    pdims: tuple[int, int],
    dtype: DataType,
    itemsize: int,
) -> dict[str, float]:
    """Measure the peer baselines of X->Y on ``pdims`` (collective); empty when X->Y moves no byte off any rank."""
    grid = handle.create_grid(config(gdims, pdims, TransposeCommBackend.MPI_P2P, False))
    try:
        if not comm.allreduce(off_rank_bytes(grid, 0, 1, itemsize) > 0, op=MPI.LOR):
            return {}
        bl = XYBaselines(xp, comm, grid, dtype)
        try:
            return bl.measures(comm, args.warmup, args.reps)
        finally:
            bl.close()
    finally:
        grid.destroy()


def autotune(handle: cudecomp.Handle, comm: MPI.Comm, gdims: tuple[int, int, int], dname: str, ac: bool) -> Row:
    """Run the autotuner (process grid and transpose backend, all four transposes).

    Returns its choice as a row whose ``ms`` is the wall time of the whole search.
    """
    opts = cudecomp.GridDescAutotuneOptions()
    opts.dtype = DTYPES[dname]
    opts.autotune_transpose_backend = True
    cfg = config(gdims, (0, 0), TransposeCommBackend.MPI_P2P, ac)
    comm.Barrier()
    t0 = time.perf_counter()
    grid = handle.create_grid(cfg, opts)
    took = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    chosen = grid.config
    row = Row(
        "tune",
        gdims,
        (int(chosen.pdims[0]), int(chosen.pdims[1])),
        TransposeCommBackend(int(chosen.transpose_comm_backend)).name,
        dname,
        ac,
        ms=took * 1e3,
        note=f"autotuner chose {TransposeCommBackend(int(chosen.transpose_comm_backend)).name} on "
        f"{chosen.pdims[0]}x{chosen.pdims[1]}; search took {took:.2f} s",
    )
    grid.destroy()
    return row


def config(
    gdims: tuple[int, int, int],
    pdims: tuple[int, int],
    backend: TransposeCommBackend,
    ac: bool,
    halo_backend: HaloCommBackend = HaloCommBackend.MPI,
) -> cudecomp.GridDescConfig:
    """Build a grid configuration (the same axis-contiguity for all three pencils)."""
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = gdims, pdims
    cfg.transpose_comm_backend = backend
    cfg.halo_comm_backend = halo_backend
    cfg.transpose_axis_contiguous = (ac, ac, ac)
    return cfg


def mean_gbps(comm: MPI.Comm, nbytes: int, seconds: float) -> float:
    """Mean over ranks of ``nbytes / seconds`` in GB/s (collective)."""
    return comm.allreduce(nbytes / seconds / 1e9, op=MPI.SUM) / comm.size


def measured_row(
    comm: MPI.Comm,
    ceils: Ceilings,
    ident: Row,
    med: float,
    mn: float,
    off: int,
    local_bytes: int,
    distributed: bool,
) -> Row:
    """Fill ``ident`` (a row naming the configuration) with its timings and bandwidth (collective).

    Distributed operations count the ``off`` bytes that leave the rank against the exchange
    ceiling; local ones count ``local_bytes`` against a copy of the same bytes.
    """
    moved = off if distributed else local_bytes
    cname, ceiling = ceils.exchange() if distributed else ceils.local(moved)
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


def run_config(
    args: argparse.Namespace,
    handle: cudecomp.Handle,
    xp: Xp,
    comm: MPI.Comm,
    gdims: tuple[int, int, int],
    pdims: tuple[int, int],
    dtype: DataType,
    dname: str,
    ac: bool,
    bname: str,
    itemsize: int,
    base: dict[str, float],
    ceils: Ceilings,
) -> list[Row]:
    """Measure the transposes and halo updates of one configuration (collective)."""
    rows: list[Row] = []
    # The halo backend of the same family as the transpose backend.
    halo_of = {
        "MPI_P2P_PL": "MPI_BLOCKING",
        "NCCL": "NCCL",
        "NCCL_PL": "NCCL",
        "DIRECT": "DIRECT",
        "NVSHMEM": "NVSHMEM",
        "NVSHMEM_PL": "NVSHMEM_BLOCKING",
        "NVSHMEM_SM": "NVSHMEM",
    }
    halo_backend = HaloCommBackend[halo_of.get(bname, "MPI")]
    try:
        grid = handle.create_grid(config(gdims, pdims, TransposeCommBackend[bname], ac, halo_backend))
    except cudecomp.CudecompError as e:
        return [Row("all", gdims, pdims, bname, dname, ac, note=f"skipped: {type(e).__name__}: {e}")]
    try:
        infos = [grid.get_pencil_info(a) for a in range(3)]
        if args.alloc == "library":
            # The library's own arrays (on DIRECT grids: node-shared host memory, exported
            # device memory).
            bufs = [grid.empty_pencil(a, NP_DTYPES[dtype]) for a in range(3)]
            for b in bufs:
                b[...] = 1
        else:
            bufs = [xp.m.ones(i.array_shape, NP_DTYPES[dtype]) for i in infos]
        for key in args.ops:
            if key not in OPS:
                continue
            name, a, b = OPS[key]
            fn = getattr(grid, name)
            inp, out = bufs[a], bufs[b]
            med, mn = measure(xp, comm, functools.partial(fn, inp, out), args.warmup, args.reps)
            off = off_rank_bytes(grid, a, b, itemsize)
            distributed = comm.allreduce(off > 0, op=MPI.LOR)
            # A local transpose is compared with a copy of the pencil's bytes.
            local_bytes = infos[a].size * itemsize
            row = measured_row(comm, ceils, Row(key, gdims, pdims, bname, dname, ac), med, mn, off, local_bytes, distributed)
            # The baselines are distributed X->Y transposes of the default layout: compare
            # only with the same (a local X->Y has none, see xy_baselines).
            if key == "xy" and not ac and distributed and base:
                row.baseline = dict(base)
                row.baseline.update({f"ratio_vs_{k[:-3]}": med * 1e3 / v for k, v in base.items() if v > 0})
            rows.append(row)
        if "halo" in args.ops and any(args.halo):
            rows += halo_rows(args, xp, comm, grid, gdims, pdims, dname, ac, itemsize, halo_backend, ceils)
        del bufs
    finally:
        grid.destroy()
    if args.graph:
        cfg = config(gdims, pdims, TransposeCommBackend[bname], ac, halo_backend)
        rows += graph_rows(args, xp, comm, cfg, NP_DTYPES[dtype], rows)
    return rows


def graph_rows(args: argparse.Namespace, xp: Xp, comm: MPI.Comm, cfg: cudecomp.GridDescConfig, dtype: Any, eager: list[Row]) -> list[Row]:
    """``--graph N``: N operations of each eager row captured into one CUDA graph (collective).

    Each row ``op-graph`` times a replay of the graph, wall clock per operation, against
    the same N operations called eagerly back to back (``eager_wall_ms``: the host path
    and the GPU work overlapping as in a solver's loop). A fresh handle serves the
    captures, so that the frozen workspace of a captured handle (docs/graphs.md) does not
    constrain the rest of the run.
    """
    m = xp.m
    h = tuple(args.halo)
    periods = (True, True, True)
    out: list[Row] = []
    with cudecomp.Handle(comm) as handle, handle.create_grid(cfg) as grid:
        bufs = [m.ones(grid.get_pencil_info(a).array_shape, dtype) for a in range(3)]
        halo = m.ones(grid.get_pencil_info(0, h).array_shape, dtype)
        s = m.cuda.Stream(non_blocking=True)

        def call(op: str) -> Callable[[], None]:
            if op in OPS:
                name, a, b = OPS[op]
                return functools.partial(getattr(grid, name), bufs[a], bufs[b], stream=s)
            dims = halo_dims(op)

            def update() -> None:
                for d in dims:
                    grid.update_halos_x(halo, h, periods, d, stream=s)

            return update

        for row in eager:
            if row.note or not (row.op in OPS or row.op in HALO_OPS):
                continue
            fn = call(row.op)
            timed = replay_times(comm, s, fn, args.graph, args.warmup, args.reps)
            if isinstance(timed, str):
                out.append(replace(row, op=f"{row.op}-graph", note=f"graph skipped: {timed}", baseline={}))
                continue
            gbps = row.gbps_per_rank * row.ms / (timed["replay"] * 1e3)
            base = {
                "eager_wall_ms": timed["eager"] * 1e3,
                "ratio_vs_eager_wall": timed["replay"] / timed["eager"],
                "eager_host_ms": timed["eager_host"] * 1e3,
                "replay_host_ms": timed["replay_host"] * 1e3,
            }
            ms, ms_min, pct = timed["replay"] * 1e3, timed["replay_min"] * 1e3, pct_of(gbps, row.ceiling_gbps)
            out.append(replace(row, op=f"{row.op}-graph", ms=ms, ms_min=ms_min, gbps_per_rank=gbps, pct_of_ceiling=pct, baseline=base))
    return out


def replay_times(comm: MPI.Comm, s: Any, fn: Callable[[], None], n: int, warmup: int, reps: int) -> dict[str, float] | str:
    """Seconds per operation of ``n`` calls of ``fn``, eager and as a replayed graph, or why it could not be captured.

    Keys: ``replay`` and ``replay_min`` (wall clock of a replay, launch to the stream's
    completion), ``replay_host`` (the launch call alone: the host's share), ``eager``
    and ``eager_host`` likewise for the calls made one by one; each divided by ``n``,
    the median per rank, then the slowest rank. Collective; a capture refused on any
    rank is abandoned on every rank (the captured work is never launched). The graph is
    dropped on return, before its grid and handle go.
    """

    def eager() -> None:
        for _ in range(n):
            fn()

    def timed(run: Callable[[], object]) -> tuple[float, float]:
        comm.Barrier()
        t0 = time.perf_counter()
        run()
        t1 = time.perf_counter()
        s.synchronize()
        return (time.perf_counter() - t0) / n, (t1 - t0) / n

    def slowest(samples: list[tuple[float, float]]) -> tuple[float, float, float]:
        walls, hosts = [t[0] for t in samples], [t[1] for t in samples]
        meds = (float(np.median(walls)), min(walls), float(np.median(hosts)))
        return tuple(comm.allreduce(v, op=MPI.MAX) for v in meds)  # type: ignore[return-value]

    for _ in range(max(warmup, 1)):  # a capture needs one eager run first
        eager()
    s.synchronize()
    e_med, _, e_host = slowest([timed(eager) for _ in range(reps)])
    why = ""
    s.begin_capture()
    try:
        eager()
    except cudecomp.CudecompError as e:
        why = f"{type(e).__name__}: {e}"
    graph = s.end_capture()
    why = comm.allreduce([why] if why else [], op=MPI.SUM)
    if why:
        return why[0]
    graph.launch(s)  # replay warm-up (graph upload)
    s.synchronize()
    g_med, g_min, g_host = slowest([timed(functools.partial(graph.launch, s)) for _ in range(reps)])
    return {"replay": g_med, "replay_min": g_min, "replay_host": g_host, "eager": e_med, "eager_host": e_host}


def halo_dims(op: str) -> list[int]:
    """Return the dimensions a halo row updates: all three for ``halo``, one for ``hx``, ``hy``, ``hz``."""
    return [0, 1, 2] if op == "halo" else ["xyz".index(op[1])]


def halo_rows(
    args: argparse.Namespace,
    xp: Xp,
    comm: MPI.Comm,
    grid: cudecomp.GridDesc,
    gdims: tuple[int, int, int],
    pdims: tuple[int, int],
    dname: str,
    ac: bool,
    itemsize: int,
    halo_backend: HaloCommBackend,
    ceils: Ceilings,
) -> list[Row]:
    """Time the periodic halo updates of X-pencils: all three dimensions, then each (collective)."""
    h = tuple(args.halo)
    info = grid.get_pencil_info(0, h)
    data = xp.m.ones(info.array_shape, NP_DTYPES[DTYPES[dname]])
    periods = (True, True, True)
    faces = [2 * h[d] * math.prod(info.shape[p] for p in range(3) if info.order[p] != d) * itemsize for d in range(3)]
    remote = [comm.allreduce(grid.get_shifted_rank(0, d, 1, True) != comm.rank, op=MPI.LOR) for d in range(3)]

    def halo_row(op: str, dims: list[int]) -> Row:
        """Bandwidth from the faces that leave the rank, or (all local) from the faces copied."""

        def update() -> None:
            for d in dims:
                grid.update_halos_x(data, h, periods, d)

        med, mn = measure(xp, comm, update, args.warmup, args.reps)
        off = sum(faces[d] for d in dims if remote[d])
        distributed = any(remote[d] for d in dims)
        ident = Row(op, gdims, pdims, halo_backend.name, dname, ac, halo=(h[0], h[1], h[2]))
        return measured_row(comm, ceils, ident, med, mn, off, sum(faces[d] for d in dims), distributed)

    ops = ["halo"] + [f"h{'xyz'[d]}" for d in range(3) if h[d] > 0]
    return [halo_row(op, halo_dims(op)) for op in ops]


def fft_kind(dname: str) -> str:
    """Return the FFT kind a dtype selects: real types ``r2c``, complex types ``c2c``."""
    return "r2c" if dname in ("f32", "f64") else "c2c"


def fft_rows(
    args: argparse.Namespace,
    handle: cudecomp.Handle,
    xp: Xp,
    comm: MPI.Comm,
    gdims: tuple[int, int, int],
    pdims: tuple[int, int],
    dname: str,
    bname: str,
    one_device: dict[tuple[Any, ...], dict[str, float]],
) -> list[Row]:
    """Time a ``cudecomp.fft`` plan's forward and backward transform (collective).

    ``f32``/``f64`` run ``r2c`` plans, ``c64``/``c128`` ``c2c`` plans, with the spectral
    output left transposed (``--fft-out transposed``, the fast path) or in the input's
    pencil (``natural``). Each row carries, as baseline, the same transform of the whole
    global array on one device (rank 0: ``cupy.fft`` on its GPU, or the plan's CPU
    library), measured once per grid and dtype in the same run.
    """
    from . import fft as cfft

    kind = fft_kind(dname)
    dtype = NP_DTYPES[DTYPES[dname]]
    rows: list[Row] = []
    for transposed in {"transposed": [True], "natural": [False], "both": [True, False]}[args.fft_out]:
        tag = "" if transposed else "natural"
        try:
            plan = cfft.FFT(handle, gdims, pdims, kind=kind, dtype=dtype, transposed_out=transposed, backend=TransposeCommBackend[bname])
        except cudecomp.CudecompError as e:
            rows.append(Row("fft", gdims, pdims, bname, dname, False, note=f"skipped: {type(e).__name__}: {e}"))
            continue
        key = (gdims, dname)
        if args.baselines and key not in one_device:
            one_device[key] = fft_one_device(xp, comm, plan, args.warmup, args.reps)
        try:
            a = plan.zeros_input()
            a += 1
            spec = plan.forward(a)
            back = plan.empty_input()
            calls = (("fft", functools.partial(plan.forward, a, spec)), ("ifft", functools.partial(plan.backward, spec, back)))
            for op, fn in calls:
                med, mn = measure(xp, comm, fn, args.warmup, args.reps)
                base = {k[len(op) + 1 :]: v for k, v in one_device.get(key, {}).items() if k.startswith(op + ":")}
                row = Row(op + (f"-{tag}" if tag else ""), gdims, pdims, bname, dname, False, ms=med * 1e3, ms_min=mn * 1e3)
                row.distributed = comm.size > 1
                row.baseline = dict(base)
                row.baseline.update({f"ratio_vs_{k[:-3]}": med * 1e3 / v for k, v in base.items() if v > 0})
                rows.append(row)
        finally:
            plan.destroy()
    return rows


def fft_one_device(xp: Xp, comm: MPI.Comm, plan: Any, warmup: int, reps: int) -> dict[str, float]:
    """Milliseconds of the plan's transform of the whole global array on rank 0's device alone (collective).

    Keys ``fft:<name>_ms`` and ``ifft:<name>_ms`` with ``<name>`` ``cupy_fftn_1gpu``
    (GPU) or ``<library>_fftn_1rank`` (CPU). Empty where the array does not fit (GPU).
    """
    out: dict[str, float] = {}
    if comm.rank == 0:
        m = xp.m
        shape = plan.gdims[::-1]
        r2c = plan.kind == "r2c"
        if xp.gpu:
            import cupy

            f = cupy.fft
            name = "cupy_fftn_1gpu"
            fwd, inv = (f.rfftn, lambda s: f.irfftn(s, s=shape)) if r2c else (f.fftn, f.ifftn)
        else:
            try:
                import scipy.fft as f  # type: ignore[import-not-found,no-redef]

                name = "scipy_fftn_1rank"
            except ImportError:
                f = np.fft
                name = "numpy_fftn_1rank"
            fwd, inv = (f.rfftn, lambda s: f.irfftn(s, s=shape, axes=(0, 1, 2))) if r2c else (f.fftn, f.ifftn)
        if xp.gpu:
            m.get_default_memory_pool().free_all_blocks()  # room for the whole array
        try:
            a = m.ones(shape, plan.input_dtype)
            s = fwd(a)
            timer = xp.timer()
            for _ in range(warmup):
                fwd(a)
                inv(s)
            xp.sync()
            out[f"fft:{name}_ms"] = float(np.median([timer(lambda: fwd(a)) for _ in range(reps)])) * 1e3
            out[f"ifft:{name}_ms"] = float(np.median([timer(lambda: inv(s)) for _ in range(reps)])) * 1e3
            del a, s
        except MemoryError:
            out = {}
        except Exception as e:  # CuPy's OutOfMemoryError and cuFFT errors
            if "memory" not in str(e).lower():
                raise
            out = {}
        if xp.gpu:
            xp.m.get_default_memory_pool().free_all_blocks()
    # The other ranks wait without spinning, so that on a CPU with fewer cores than ranks
    # they leave rank 0 its core.
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.002)
    return comm.bcast(out, root=0)


def report(rows: Sequence[Row], args: argparse.Namespace) -> None:
    """Print the table (rank 0)."""
    w = max([5] + [len(r.op) + 1 for r in rows])
    head = f"{'op':<{w}}{'gdims':<16}{'pdims':<7}{'backend':<13}{'dtype':<6}{'ac':<3}"
    print(f"{head}{'ms':>10}{'GB/s/rank':>11}{'%ceil':>7}  {'ceiling':<10}baselines (ms; ours/baseline)")
    for r in rows:
        key = f"{r.op:<{w}}{'x'.join(map(str, r.gdims)):<16}{'x'.join(map(str, r.pdims)):<7}{r.backend:<13}{r.dtype:<6}"
        key += f"{int(r.axis_contiguous):<3}"
        if r.note:
            print(f"{key}  {r.note}")
            continue
        extra = ", ".join(f"{k}={v:.3g}" for k, v in r.baseline.items() if not k.startswith("ceiling"))
        pct = f"{r.pct_of_ceiling:>7.1f}" if math.isfinite(r.pct_of_ceiling) else f"{'-':>7}"
        tag = CEILING_TAGS.get(r.ceiling, r.ceiling or "-")
        gbps = f"{r.gbps_per_rank:>11.2f}" if math.isfinite(r.gbps_per_rank) else f"{'-':>11}"
        print(f"{key}{r.ms:>10.3f}{gbps}{pct}  {tag:<10}{extra}".rstrip())
    ceil = {k: v for k, v in (rows[0].baseline.items() if rows else []) if k.startswith("ceiling")}
    print("ceilings (GB/s): " + ", ".join(f"{k[8:-5]}={v:.1f}" for k, v in ceil.items()))
    print("%ceil: distributed rows (bytes leave the rank) against the run-wide copy bandwidth above (peer, dev or host;")
    print("       '-' when the ranks span several nodes); local rows (nothing leaves the rank) against a copy of the")
    ffts = any(r.op.split("-")[0] in FFT_OPS for r in rows)
    end = "," if ffts else "."
    print(f"       same bytes on every rank at once (dev-same, host-same). Baselines: beside distributed X->Y rows only{end}")
    if ffts:
        print("       and beside fft/ifft rows the same transform of the whole array on one device (rank 0's GPU or CPU).")
    if any(r.op.endswith("-graph") for r in rows):
        print("op-graph rows: wall clock per operation of a CUDA graph's replay; eager_wall_ms: the same operations called")
        print("       eagerly back to back, wall clock per operation; *_host_ms: the host's share (the calls, or the launch).")


def write(rows: Sequence[Row], args: argparse.Namespace) -> None:
    """Write JSON and CSV files (rank 0)."""
    meta = {
        "cudecomp": cudecomp.__version__,
        "cpu_only": cudecomp.CPU_ONLY,
        "ranks": MPI.COMM_WORLD.size,
        "host": platform.node(),
        "argv": sys.argv,
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": [asdict(r) for r in rows]}, f, indent=1)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            # The original columns (op .. note), then the baselines, then fields added
            # later: existing columns keep their places.
            names = [f.name for f in fields(Row)]
            keys = [k for k in names[: names.index("note") + 1] if k != "baseline"]
            added = names[names.index("note") + 1 :]
            bkeys = sorted({k for r in rows for k in r.baseline})
            w.writerow(keys + bkeys + added)
            for r in rows:
                d = asdict(r)
                w.writerow([d[k] for k in keys] + [r.baseline.get(k, "") for k in bkeys] + [d[k] for k in added])


def text_colour(rgba: Sequence[float] | np.ndarray) -> str:
    """``"black"`` or ``"white"``: the text colour that contrasts more with a cell of colour ``rgba``.

    From the cell's WCAG relative luminance ``L`` (linearised sRGB): black text has the
    higher contrast ratio exactly when ``L > 0.179``.
    """

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(float(c)) for c in rgba[:3])
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.179 else "white"


def _cells(rows: Sequence[Row]) -> dict[tuple[Any, ...], tuple[float, float, bool]]:
    """(op, gdims, pdims, backend, dtype, ac) -> (GB/s, % of ceiling, distributed), averaged over repeats.

    Halo rows repeat when several transpose backends share a halo backend (MPI_P2P and
    MPI_A2A both use MPI).
    """
    acc: dict[tuple[Any, ...], list[Row]] = {}
    for r in rows:
        if not r.note and math.isfinite(r.gbps_per_rank):
            acc.setdefault((r.op, tuple(r.gdims), tuple(r.pdims), r.backend, r.dtype, bool(r.axis_contiguous)), []).append(r)
    out = {}
    for k, rs in acc.items():
        pcts = [r.pct_of_ceiling for r in rs if math.isfinite(r.pct_of_ceiling)]
        out[k] = (float(np.mean([r.gbps_per_rank for r in rs])), float(np.mean(pcts)) if pcts else math.nan, rs[0].distributed)
    return out


def _label(dims: Sequence[int]) -> str:
    return "x".join(map(str, dims))


def _pct_text(p: float) -> str:
    return f"{p:.0f} %" if p >= 10 else f"{p:.2g} %"


def plot(rows: Sequence[Row], outdir: str) -> list[str]:
    """Render ``heatmap-<op>-<grid>.png`` and the bandwidth-versus-size PNGs into ``outdir``; their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(outdir, exist_ok=True)
    cells = _cells(rows)
    written: list[str] = []
    ops = [op for op in (*OPS, *HALO_OPS) if any(k[0] == op for k in cells)]
    for op in ops:
        for gd in sorted({k[1] for k in cells if k[0] == op}):
            sel = {k: v for k, v in cells.items() if k[0] == op and k[1] == gd}
            grids = sorted({k[2] for k in sel})
            backs = sorted({k[3:] for k in sel})
            m = np.full((len(backs), len(grids)), np.nan)
            pct = np.full_like(m, np.nan)
            for k, (gbps, p, _) in sel.items():
                m[backs.index(k[3:]), grids.index(k[2])], pct[backs.index(k[3:]), grids.index(k[2])] = gbps, p
            fig, ax = plt.subplots(figsize=(2.4 + 1.1 * len(grids), 1.3 + 0.42 * len(backs)), layout="constrained")
            finite = m[np.isfinite(m) & (m > 0)]
            norm: Any = None
            if finite.size and finite.max() / finite.min() > 20:
                norm = matplotlib.colors.LogNorm(finite.min(), finite.max())
            cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.85")
            im = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, norm=norm, aspect="auto")
            local = {g for g in grids if not any(v[2] for k, v in sel.items() if k[2] == g)}
            ax.set_xticks(range(len(grids)), [_label(g) + ("\n(local)" if g in local else "") for g in grids])
            ax.set_yticks(range(len(backs)), [f"{b} {d} ac{int(ac)}" for b, d, ac in backs])
            ax.set_xlabel("process grid")
            for i in range(len(backs)):
                for j in range(len(grids)):
                    if not np.isfinite(m[i, j]):
                        ax.text(j, i, "n/a", ha="center", va="center", color="black", fontsize=8)
                        continue
                    txt = f"{m[i, j]:.3g}" + (f"\n{_pct_text(pct[i, j])}" if np.isfinite(pct[i, j]) else "")
                    ax.text(j, i, txt, ha="center", va="center", color=text_colour(im.cmap(im.norm(m[i, j]))), fontsize=8)
            ax.set_title(f"{OP_TITLES[op]} {_label(gd)}: GB/s per rank (% of ceiling)", fontsize=10)
            fig.colorbar(im, ax=ax, label="GB/s per rank")
            path = os.path.join(outdir, f"heatmap-{op}-{_label(gd)}.png")
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    for family, name, title in ((OPS, "bandwidth-vs-size.png", "transposes"), (HALO_OPS, "bandwidth-vs-size-halo.png", "halo updates")):
        fam = [op for op in ops if op in family]
        if fam:
            path = os.path.join(outdir, name)
            _size_panels(plt, {k: v for k, v in cells.items() if k[0] in fam}, fam, title, path)
            written.append(path)
    return written


def _size_panels(plt: Any, cells: dict[tuple[Any, ...], tuple[float, float, bool]], ops: list[str], title: str, path: str) -> None:
    """Small multiples: one panel per operation (rows) and backend (columns), GB/s per rank versus grid points.

    Colour: process grid; line style: dtype and layout; hollow markers: local points (no
    byte leaves the rank). One short legend outside the panels.
    """
    from matplotlib.lines import Line2D

    backends = list(dict.fromkeys(k[3] for k in cells))  # in the order measured
    grids = sorted({k[2] for k in cells})
    variants = sorted({k[4:] for k in cells})
    colours = [plt.get_cmap("tab10")(i % 10) for i in range(len(grids))]
    styles: list[Any] = ["-", "--", ":", "-."]
    nr, nc = len(ops), len(backends)
    fig, axes = plt.subplots(
        nr, nc, figsize=(2.3 + 2.5 * nc, 1.0 + 2.0 * nr), sharex=True, sharey=True, squeeze=False, layout="constrained"
    )
    for i, op in enumerate(ops):
        for j, backend in enumerate(backends):
            ax = axes[i][j]
            drawn = False
            for gi, pd in enumerate(grids):
                for vi, var in enumerate(variants):
                    pts = sorted(
                        (math.prod(k[1]), v) for k, v in cells.items() if k[0] == op and k[2] == pd and k[3] == backend and k[4:] == var
                    )
                    pts = [(x, v) for x, v in pts if v[0] > 0]
                    if not pts:
                        continue
                    xs, ys = [x for x, _ in pts], [v[0] for _, v in pts]
                    ax.plot(xs, ys, color=colours[gi], linestyle=styles[vi % len(styles)], linewidth=1.2)
                    for x, (y, _, dist) in pts:
                        ax.plot([x], [y], marker="o", markersize=4.5, color=colours[gi], markerfacecolor=colours[gi] if dist else "white")
                    drawn = True
            if not drawn:
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.5", fontsize=8)
            if i == 0:
                ax.set_title(backend, fontsize=10)
            if j == 0:
                ax.set_ylabel(f"{OP_TITLES[op]}\nGB/s per rank", fontsize=9)
            if i == nr - 1:
                ax.set_xlabel("grid points", fontsize=9)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="major", alpha=0.3)
            ax.tick_params(labelsize=8)
    blank = Line2D([], [], linestyle="none")
    handles: list[Any] = [blank] + [Line2D([], [], color=c, linewidth=2) for c in colours]
    labels = ["process grid"] + [_label(g) for g in grids]
    handles += [blank] + [Line2D([], [], color="0.3", linestyle=styles[v % len(styles)]) for v in range(len(variants))]
    labels += ["dtype, layout"] + [f"{d} ac{int(ac)}" for d, ac in variants]
    handles += [
        blank,
        Line2D([], [], linestyle="none", marker="o", color="0.3"),
        Line2D([], [], linestyle="none", marker="o", color="0.3", markerfacecolor="white"),
    ]
    labels += ["marker", "distributed", "local"]
    leg = fig.legend(handles, labels, loc="outside right upper", fontsize=8, frameon=False, handlelength=2.2)
    for text in leg.get_texts():
        if text.get_text() in ("process grid", "dtype, layout", "marker"):
            text.set_fontweight("bold")
    fig.suptitle(f"Bandwidth per rank versus grid size: {title}", fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    """Build the command-line parser; every option's help ends with its default."""
    p = argparse.ArgumentParser(
        prog="python -m cudecomp.bench",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Run under MPI, e.g. mpiexec -n 4 python -m cudecomp.bench --gdims 128^3 --pdims all --plot out/",
    )
    ops = ", ".join([*OPS, "halo"])
    choices = [*OPS, "halo", "fft"]
    p.add_argument(
        "--gdims",
        nargs="+",
        type=parse_grid,
        default=[(64, 64, 64)],
        metavar="GRID",
        help="global grids, each N^3, NX,NY,NZ or NXxNYxNZ (default: 64^3)",
    )
    p.add_argument(
        "--pdims", default="all", help="process grids: all (every factorisation of the rank count) or a list like 1x2,2x1 (default: all)"
    )
    p.add_argument(
        "--backends",
        default="all",
        type=parse_backends,
        help="comma-separated TransposeCommBackend names (e.g. MPI_P2P,DIRECT), or all (default: all)",
    )
    p.add_argument("--dtypes", nargs="+", default=["c128"], choices=list(DTYPES), help="element types (default: c128)")
    p.add_argument(
        "--axis-contiguous",
        nargs="+",
        type=int,
        default=[0],
        choices=[0, 1],
        help="pencil layouts: 0 = default, 1 = axis-contiguous (default: 0)",
    )
    p.add_argument(
        "--ops",
        nargs="+",
        default=[*OPS, "halo"],
        choices=choices,
        help=f"operations to time; fft = a cudecomp.fft plan's forward and backward transform (default: {ops})",
    )
    p.add_argument(
        "--fft-out",
        default="transposed",
        choices=["transposed", "natural", "both"],
        help="--ops fft: spectral output left in the Z-pencil (transposed, no return transposes) or returned to the "
        "X-pencil (natural; rows fft-natural, ifft-natural) (default: transposed)",
    )
    p.add_argument(
        "--halo",
        nargs=3,
        type=int,
        default=[1, 1, 1],
        metavar=("HX", "HY", "HZ"),
        help="halo extents for the halo benchmark (default: 1 1 1)",
    )
    p.add_argument(
        "--graph",
        type=int,
        default=0,
        metavar="N",
        help="GPU: also capture N of each transpose and halo update into a CUDA graph and time its replay against "
        "N eager calls, wall clock per operation (rows op-graph; capturable backends only; 0 = off) (default: 0)",
    )
    p.add_argument(
        "--alloc",
        choices=["user", "library"],
        default="user",
        help="arrays of the transposes: user (NumPy/CuPy arrays made by the benchmark) or library "
        "(GridDesc.empty_pencil: on DIRECT grids node-shared host memory or exported device memory, where "
        "transposes then run as single copies) (default: user)",
    )
    p.add_argument("--warmup", type=int, default=3, help="untimed calls before timing (default: 3)")
    p.add_argument("--reps", type=int, default=10, help="timed calls; the median is reported (default: 10)")
    p.add_argument(
        "--no-baselines", dest="baselines", action="store_false", help="skip the peer baselines of distributed X->Y (default: measure them)"
    )
    p.add_argument("--autotune", action="store_true", help="also run the autotuner (grid + backend) and report its choice (default: off)")
    p.add_argument("--json", metavar="FILE", help="write rows as JSON (default: not written)")
    p.add_argument("--csv", metavar="FILE", help="write rows as CSV (default: not written)")
    p.add_argument("--plot", metavar="DIR", help="directory for PNG heatmaps and bandwidth plots; needs matplotlib (default: no plots)")
    p.add_argument(
        "--progress",
        default="auto",
        choices=PROGRESS_MODES,
        help="progress on rank 0's stderr: auto = a tqdm bar when stderr is a terminal and tqdm is installed, else none; "
        "bar = a tqdm bar even into a pipe (mpiexec's ranks write into pipes); lines = one plain line per configuration; "
        "off (default: auto)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress output, the same as --progress off (default: off)")
    return p


def preflight(args: argparse.Namespace, comm: MPI.Comm) -> str:
    """Check, before any measurement, what the end of the run needs (collective).

    Returns the first problem found on rank 0 (the one that writes and plots), the same
    on every rank, or "".
    """
    problem = ""
    if comm.rank == 0:
        problem = _output_problem(args)
    if not problem and not process_grids(args.pdims, comm.size):
        problem = f"--pdims {args.pdims}: no process grid of {comm.size} ranks"
    return comm.bcast(problem, root=0)


def _output_problem(args: argparse.Namespace) -> str:
    if args.plot:
        try:
            importlib.import_module("matplotlib")
        except ImportError:
            return "--plot needs matplotlib, which is not installed (pip install matplotlib), or leave out --plot"
        try:
            os.makedirs(args.plot, exist_ok=True)
        except OSError as e:
            return f"--plot {args.plot}: cannot create the directory: {e}"
    if args.graph < 0:
        return f"--graph must be >= 0 operations, got {args.graph}"
    if args.graph and cudecomp.CPU_ONLY:
        return "--graph needs the GPU variant (CUDA graphs); this is the CPU variant"
    if args.progress == "bar" and not args.quiet and tqdm_class() is None:
        return "--progress bar needs tqdm, which is not installed (pip install tqdm)"
    for opt in ("json", "csv"):
        path = getattr(args, opt)
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            return f"--{opt} {path}: the directory does not exist"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (all ranks) and report on rank 0."""
    args = parser().parse_args(argv)
    if args.reps < 1 or args.warmup < 0:
        raise SystemExit("--reps must be >= 1 and --warmup >= 0")
    problem = preflight(args, MPI.COMM_WORLD)
    if problem:
        raise SystemExit(f"python -m cudecomp.bench: error: {problem}")
    rows = run(args)
    if MPI.COMM_WORLD.rank == 0:
        report(rows, args)
        write(rows, args)
        if args.plot:
            plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
