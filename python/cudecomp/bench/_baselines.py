"""Peer baselines measured in the same run: user-written X->Y transposes and one device's whole-array FFT."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

import cudecomp
from cudecomp import DataType, TransposeCommBackend

from ._common import MPI_TYPES, NP_DTYPES, Case, config
from ._measure import Session, Xp, boxes, off_rank_bytes, on_root


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
        self.types: list[Any] = []  # MPI datatypes of alltoallw, freed by close()
        if xp.own_gpus:
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
        self.types += stypes + rtypes
        ones, zeros = [1] * self.col.size, [0] * self.col.size

        def run() -> None:
            self.col.Alltoallw([x, (ones, zeros), stypes], [y, (ones, zeros), rtypes])

        return run

    def measures(self, s: Session) -> dict[str, float]:
        """Median milliseconds of each baseline, keyed ``<name>_ms`` (collective over ``s.comm``)."""
        if self.nccl is not None:
            fns = {"raw_nccl_alltoall": self.exchange, "cupy_pack_nccl_unpack": self.pack_exchange_unpack}
        elif self.xp.gpu:
            fns = {"cupy_pack_staged_mpi_unpack": self.pack_exchange_unpack}
        else:
            fns = {"mpi_alltoallw_subarray": self.alltoallw(), "numpy_pack_alltoallv_unpack": self.pack_exchange_unpack}
        return {f"{name}_ms": s.time(fn)[0] * 1e3 for name, fn in fns.items()}

    def close(self) -> None:
        """Free the communicators and datatypes."""
        for t in self.types:
            t.Free()
        self.types = []
        if self.nccl is not None:
            self.nccl.destroy()
        self.col.Free()


def xy_baselines(s: Session, case: Case) -> dict[str, float]:
    """Measure the peer baselines of X->Y of ``case`` (collective); empty when X->Y moves no byte off any rank or a pencil is empty."""
    grid = s.handle.create_grid(config(case.gdims, case.pdims, TransposeCommBackend.MPI_P2P, False))
    try:
        if s.comm.allreduce(any(grid.get_pencil_info(a).size == 0 for a in (0, 1)), op=MPI.LOR):
            return {}  # empty pencils: no transpose to compare with (its rows are skipped)
        if not s.comm.allreduce(off_rank_bytes(grid, 0, 1, case.itemsize) > 0, op=MPI.LOR):
            return {}
        bl = XYBaselines(s.xp, s.comm, grid, case.dtype)
        try:
            return bl.measures(s)
        finally:
            bl.close()
    finally:
        grid.destroy()


def fft_one_device(s: Session, plan: Any) -> dict[str, float]:
    """Milliseconds of the plan's transform of the whole global array on rank 0's device alone (collective).

    Keys ``fft:<name>_ms`` and ``ifft:<name>_ms`` with ``<name>`` ``cupy_fftn_1gpu``
    (GPU) or ``<library>_fftn_1rank`` (CPU). Empty where the array does not fit (GPU).
    """
    xp = s.xp

    def measure_on_root() -> dict[str, float]:
        m = xp.m
        shape = plan.gdims[::-1]
        r2c = plan.kind == "r2c"
        if xp.gpu:
            import cupy

            f = cupy.fft
            name = "cupy_fftn_1gpu"
            inv_axes: dict[str, Any] = {}
        else:
            try:
                import scipy.fft as f  # type: ignore[no-redef]

                name = "scipy_fftn_1rank"
            except ImportError:
                f = np.fft
                name = "numpy_fftn_1rank"
            inv_axes = {"axes": (0, 1, 2)}
        norm = plan.norm
        fwd = functools.partial(f.rfftn if r2c else f.fftn, norm=norm)
        inv = functools.partial(f.irfftn, s=shape, norm=norm, **inv_axes) if r2c else functools.partial(f.ifftn, norm=norm)
        if xp.gpu:
            m.get_default_memory_pool().free_all_blocks()  # room for the whole array
        out: dict[str, float] = {}
        try:
            a = m.ones(shape, plan.input_dtype)
            spec = fwd(a)
            timer = xp.timer()
            for _ in range(s.args.warmup):
                fwd(a)
                inv(spec)
            xp.sync()
            reps = s.args.reps
            out[f"fft:{name}_ms"] = float(np.median([timer(functools.partial(fwd, a)) for _ in range(reps)])) * 1e3
            out[f"ifft:{name}_ms"] = float(np.median([timer(functools.partial(inv, spec)) for _ in range(reps)])) * 1e3
            del a, spec
        except MemoryError:
            out = {}
        except Exception as e:  # CuPy's OutOfMemoryError and cuFFT errors
            if "memory" not in str(e).lower():
                raise
            out = {}
        if xp.gpu:
            m.get_default_memory_pool().free_all_blocks()
        return out

    return on_root(s.comm, measure_on_root)
