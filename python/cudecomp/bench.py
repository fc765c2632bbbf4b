"""Benchmark CLI: ``mpiexec -n N python -m cudecomp.bench [options]``.

Sweeps grids, process grids, backends, dtypes and layouts; times the four transposes and
halo updates (warm-up, then >= 10 timed repetitions; CUDA events on GPU, wall clock on
CPU; the median per rank, then the slowest rank); and reports, per row, the achieved
bandwidth per rank (bytes that leave the rank / time) next to the same-run ceiling (peer
copy between GPUs, else device or host memory copy) and the same-run peer baselines on the
same data (X->Y, default layout): on GPU a raw NCCL all-to-all of the same bytes and the
straightforward CuPy pack -> all-to-all -> unpack a user would write (NCCL when every rank
has its own GPU, host-staged MPI otherwise); on CPU the MPI ``Alltoallw`` of subarray
datatypes that mpi4py-fft's pencil ``Transfer`` performs, and NumPy pack -> ``Alltoallv``
-> unpack. Writes JSON and CSV; ``--plot DIR`` renders heatmaps (backend x process grid)
and bandwidth-versus-size plots.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

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


@dataclass
class Row:
    """One measured configuration."""

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
        if self.gpu:
            self.m.cuda.get_current_stream().synchronize()

    def host(self, a: Any) -> np.ndarray:
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
    """Same-run copy bandwidths in GB/s (bytes copied / time)."""
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
        for j, (x0, x1) in enumerate(self.xr):
            n = self.send_counts[j]
            self.sbuf[self.sdispl[j] : self.sdispl[j] + n].reshape(self.x.shape[0], self.x.shape[1], x1 - x0)[...] = self.x[:, :, x0:x1]

    def unpack(self) -> None:
        for j, (y0, y1) in enumerate(self.yr):
            n = self.recv_counts[j]
            self.y[:, y0:y1, :] = self.rbuf[self.rdispl[j] : self.rdispl[j] + n].reshape(self.y.shape[0], y1 - y0, self.y.shape[2])

    def exchange(self) -> None:
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
        if self.nccl is not None:
            self.nccl.destroy()
        self.col.Free()


def parse_grid(s: str) -> tuple[int, int, int]:
    if "^" in s:
        n = int(s.split("^")[0])
        return (n, n, n)
    v = [int(t) for t in s.replace("x", ",").split(",")]
    return (v[0], v[1], v[2]) if len(v) == 3 else (v[0], v[0], v[0])


def process_grids(spec: str, n: int) -> list[tuple[int, int]]:
    if spec == "all":
        return [(r, n // r) for r in range(1, n + 1) if n % r == 0]
    out = []
    for s in spec.split(","):
        r, c = (int(v) for v in s.split("x"))
        if r * c == n:
            out.append((r, c))
    return out


def default_backends(xp: Xp) -> list[str]:
    names = ["MPI_P2P", "MPI_P2P_PL", "MPI_A2A"]
    if xp.gpu and xp.local_size <= xp.ngpus:
        names = ["NCCL", "NCCL_PL"] + names
    return names + ["DIRECT"]


def run(args: argparse.Namespace) -> list[Row]:
    comm = MPI.COMM_WORLD
    xp = Xp()
    ceil = ceilings(xp, comm)
    exchange_ceiling = ceil.get("peer_copy", ceil.get("device_copy", ceil.get("host_copy", math.nan)))
    local_ceiling = ceil.get("device_copy", ceil.get("host_copy", math.nan))
    backends = args.backends.split(",") if args.backends != "all" else default_backends(xp)
    rows: list[Row] = []
    grids = process_grids(args.pdims, comm.size)
    total = len(args.gdims) * len(args.dtypes) * len(args.axis_contiguous) * len(backends) * max(1, len(grids))
    done = 0
    handle = cudecomp.Handle(comm)
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
                    cfg = config(gdims, pdims, TransposeCommBackend.MPI_P2P, False)
                    g = handle.create_grid(cfg)
                    bl = XYBaselines(xp, comm, g, dtype)
                    base = bl.measures(comm, args.warmup, args.reps)
                    bl.close()
                    g.destroy()
                for ac in args.axis_contiguous:
                    for bname in backends:
                        done += 1
                        if comm.rank == 0 and not args.quiet:
                            bar = "#" * (30 * done // total)
                            sys.stderr.write(f"\r[{bar:<30}] {done}/{total} {gdims} {pdims} {dname} {bname} ac={ac}   ")
                            sys.stderr.flush()
                        rows += run_config(
                            args,
                            handle,
                            xp,
                            comm,
                            gdims,
                            pdims,
                            dtype,
                            dname,
                            bool(ac),
                            bname,
                            itemsize,
                            base,
                            exchange_ceiling,
                            local_ceiling,
                        )
    handle.finalize()
    if comm.rank == 0 and not args.quiet:
        sys.stderr.write("\n")
    for r in rows:
        r.baseline = {**r.baseline, **{f"ceiling_{k}_gbps": v for k, v in ceil.items()}}
    return rows


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
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = gdims, pdims
    cfg.transpose_comm_backend = backend
    cfg.halo_comm_backend = halo_backend
    cfg.transpose_axis_contiguous = (ac, ac, ac)
    return cfg


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
    exchange_ceiling: float,
    local_ceiling: float,
) -> list[Row]:
    rows: list[Row] = []
    # The halo backend of the same family as the transpose backend.
    halo_of = {"MPI_P2P_PL": "MPI_BLOCKING", "NCCL": "NCCL", "NCCL_PL": "NCCL", "DIRECT": "DIRECT"}
    halo_backend = HaloCommBackend[halo_of.get(bname, "MPI")]
    try:
        grid = handle.create_grid(config(gdims, pdims, TransposeCommBackend[bname], ac, halo_backend))
    except cudecomp.CudecompError as e:
        return [Row("all", gdims, pdims, bname, dname, ac, note=f"skipped: {type(e).__name__}: {e}")]
    try:
        infos = [grid.get_pencil_info(a) for a in range(3)]
        bufs = [xp.m.ones(i.array_shape, NP_DTYPES[dtype]) for i in infos]
        for key in args.ops:
            if key == "halo":
                continue
            name, a, b = OPS[key]
            fn = getattr(grid, name)
            inp, out = bufs[a], bufs[b]
            med, mn = measure(xp, comm, lambda fn=fn, inp=inp, out=out: fn(inp, out), args.warmup, args.reps)
            off = off_rank_bytes(grid, a, b, itemsize)
            local = off == 0
            moved = off if not local else infos[a].size * itemsize
            gbps = comm.allreduce(moved / med / 1e9, op=MPI.SUM) / comm.size
            ceiling = local_ceiling if comm.allreduce(local, op=MPI.LAND) else exchange_ceiling
            row = Row(
                key,
                gdims,
                pdims,
                bname,
                dname,
                ac,
                ms=med * 1e3,
                ms_min=mn * 1e3,
                gbps_per_rank=gbps,
                bytes_off_rank=comm.allreduce(off, op=MPI.MAX),
                ceiling_gbps=ceiling,
                pct_of_ceiling=100 * gbps / ceiling,
            )
            if key == "xy" and not ac:
                row.baseline = {k: v for k, v in base.items()}
                row.baseline.update({f"ratio_vs_{k[:-3]}": med * 1e3 / v for k, v in base.items() if v > 0})
            rows.append(row)
        if "halo" in args.ops and any(args.halo):
            h = tuple(args.halo)
            info = grid.get_pencil_info(0, h)
            data = xp.m.ones(info.array_shape, NP_DTYPES[dtype])

            periods = (True, True, True)
            faces = [2 * h[d] * math.prod(info.shape[p] for p in range(3) if info.order[p] != d) * itemsize for d in range(3)]
            remote = [comm.allreduce(grid.get_shifted_rank(0, d, 1, True) != comm.rank, op=MPI.LOR) for d in range(3)]

            def halo_row(op: str, dims: list[int]) -> Row:
                """Time the halo updates of ``dims``; bandwidth from the faces that leave the rank, or (all local) that are copied."""
                med, mn = measure(xp, comm, lambda: [grid.update_halos_x(data, h, periods, d) for d in dims], args.warmup, args.reps)
                off = [d for d in dims if remote[d]]
                moved = sum(faces[d] for d in (off or dims))
                ceiling = exchange_ceiling if off else local_ceiling
                gbps = comm.allreduce(moved / med / 1e9, op=MPI.SUM) / comm.size
                pct = 100 * gbps / ceiling
                return Row(op, gdims, pdims, halo_backend.name, dname, ac, h, med * 1e3, mn * 1e3, gbps, moved, ceiling, pct)

            rows.append(halo_row("halo", [0, 1, 2]))
            rows += [halo_row(f"h{'xyz'[d]}", [d]) for d in range(3) if h[d] > 0]
        del bufs
    finally:
        grid.destroy()
    return rows


def report(rows: Sequence[Row], args: argparse.Namespace) -> None:
    """Print the table (rank 0)."""
    head = f"{'op':<5}{'gdims':<16}{'pdims':<7}{'backend':<13}{'dtype':<6}{'ac':<3}"
    print(f"{head}{'ms':>10}{'GB/s/rank':>11}{'%ceil':>7}  baselines (ms; ours/baseline)")
    for r in rows:
        key = f"{r.op:<5}{'x'.join(map(str, r.gdims)):<16}{'x'.join(map(str, r.pdims)):<7}{r.backend:<13}{r.dtype:<6}"
        key += f"{int(r.axis_contiguous):<3}"
        if r.note:
            print(f"{key}  {r.note}")
            continue
        extra = ", ".join(f"{k}={v:.3g}" for k, v in r.baseline.items() if not k.startswith("ceiling"))
        print(f"{key}{r.ms:>10.3f}{r.gbps_per_rank:>11.2f}{r.pct_of_ceiling:>7.1f}  {extra}")
    ceil = {k: v for k, v in (rows[0].baseline.items() if rows else []) if k.startswith("ceiling")}
    print("ceilings (GB/s): " + ", ".join(f"{k[8:-5]}={v:.1f}" for k, v in ceil.items()))


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
            keys = [k for k in asdict(rows[0]) if k != "baseline"] if rows else []
            bkeys = sorted({k for r in rows for k in r.baseline})
            w.writerow(keys + bkeys)
            for r in rows:
                d = asdict(r)
                w.writerow([d[k] for k in keys] + [r.baseline.get(k, "") for k in bkeys])


def plot(rows: Sequence[Row], outdir: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(outdir, exist_ok=True)
    good = [r for r in rows if not r.note]
    for op in sorted({r.op for r in good}):
        for gd in sorted({r.gdims for r in good}):
            sel = [r for r in good if r.op == op and r.gdims == gd]
            grids = sorted({r.pdims for r in sel})
            backs = sorted({f"{r.backend}/{r.dtype}/ac{int(r.axis_contiguous)}" for r in sel})
            if not sel:
                continue
            m = np.full((len(backs), len(grids)), np.nan)
            for r in sel:
                m[backs.index(f"{r.backend}/{r.dtype}/ac{int(r.axis_contiguous)}"), grids.index(r.pdims)] = r.gbps_per_rank
            fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(grids), 1.2 + 0.45 * len(backs)))
            im = ax.imshow(m, cmap="viridis", aspect="auto")
            ax.set_xticks(range(len(grids)), [f"{a}x{b}" for a, b in grids])
            ax.set_yticks(range(len(backs)), backs)
            for i in range(len(backs)):
                for j in range(len(grids)):
                    if not np.isnan(m[i, j]):
                        ax.text(j, i, f"{m[i, j]:.1f}", ha="center", va="center", color="w", fontsize=8)
            ax.set_title(f"{op} {'x'.join(map(str, gd))}: GB/s per rank")
            fig.colorbar(im, ax=ax)
            fig.tight_layout()
            fig.savefig(os.path.join(outdir, f"heatmap-{op}-{'x'.join(map(str, gd))}.png"), dpi=110)
            plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key in sorted({(r.op, r.backend, r.pdims, r.dtype) for r in good if r.op != "halo"}):
        sel = sorted((r for r in good if (r.op, r.backend, r.pdims, r.dtype) == key), key=lambda r: math.prod(r.gdims))
        if len(sel) > 1:
            ax.plot([math.prod(r.gdims) for r in sel], [r.gbps_per_rank for r in sel], marker="o", label=" ".join(map(str, key)))
    ax.set_xscale("log")
    ax.set_xlabel("grid points")
    ax.set_ylabel("GB/s per rank")
    if ax.lines:
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "bandwidth-vs-size.png"), dpi=110)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cudecomp.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--gdims", nargs="+", type=parse_grid, default=[(64, 64, 64)], help="grids: 256^3 or 128,96,64")
    p.add_argument("--pdims", default="all", help="process grids: all, or 1x2,2x1")
    p.add_argument("--backends", default="all", help="comma-separated TransposeCommBackend names, or all")
    p.add_argument("--dtypes", nargs="+", default=["c128"], choices=list(DTYPES))
    p.add_argument("--axis-contiguous", nargs="+", type=int, default=[0], choices=[0, 1])
    p.add_argument("--ops", nargs="+", default=["xy", "yz", "zy", "yx", "halo"], choices=[*OPS, "halo"])
    p.add_argument("--halo", nargs=3, type=int, default=[1, 1, 1], help="halo extents for the halo benchmark")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--no-baselines", dest="baselines", action="store_false")
    p.add_argument("--autotune", action="store_true", help="also run the autotuner (grid + backend) and report its choice")
    p.add_argument("--json", help="write rows as JSON")
    p.add_argument("--csv", help="write rows as CSV")
    p.add_argument("--plot", help="directory for PNG heatmaps and bandwidth plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (all ranks) and report on rank 0."""
    args = parser().parse_args(argv)
    if args.reps < 1 or args.warmup < 0:
        raise SystemExit("--reps must be >= 1 and --warmup >= 0")
    rows = run(args)
    if MPI.COMM_WORLD.rank == 0:
        report(rows, args)
        write(rows, args)
        if args.plot:
            plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
