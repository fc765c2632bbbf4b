"""``--ops redistribute``: redistributions and X<->Z transposes beside what users write by hand.

Rows, each with its same-run comparisons in ``baseline``:

- ``rd-xy``: a redistribution between the X- and Y-pencils of the grid, beside
  ``transpose_x_to_y`` (``transpose_ms``): the same exchange through the general path;
- ``rd-xz``: ``transpose_x_to_z`` (one exchange), beside ``transpose_x_to_y`` then
  ``transpose_y_to_z`` (``xy_then_yz_ms``) and, where mpi4py-fft is installed (CPU),
  its ``Pencil.transfer`` from X-aligned to Z-aligned pencils of the same global array
  on the same ranks (``mpi4py_fft_ms``);
- ``rd-grid``: the X-pencils of this process grid to those of another (``P_cols x
  P_rows``, or ``1 x N`` where that is the same grid);
- ``rd-brick``: bricks (the ranks as a 3-D grid of boxes) to this grid's X-pencils.

``rd-grid`` and ``rd-brick`` stand beside one ``MPI_Alltoallw`` with subarray datatypes
between the same arrays (``alltoallw_ms``) and a gather of every rank's cells to rank 0
followed by a scatter of the new layout (``gather_scatter_ms``), both on host memory
(CPU variant).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

import cudecomp
from cudecomp import BoxLayout, TransposeCommBackend

from ._common import MPI_TYPES, Case, Row, config
from ._measure import Session

REDISTRIBUTE_OPS = ("rd-xy", "rd-xz", "rd-grid", "rd-brick")


def box_of(info: cudecomp.PencilInfo) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Return the global cells ``(lo, end)`` (end exclusive, X, Y, Z) a pencil owns."""
    lo, end = [0, 0, 0], [0, 0, 0]
    for k, g in enumerate(info.order):
        lo[g], end[g] = info.lo[k], info.hi[k] + 1
    return (lo[0], lo[1], lo[2]), (end[0], end[1], end[2])


def overlap(a: tuple[Any, Any], b: tuple[Any, Any]) -> tuple[list[int], list[int]] | None:
    """Return the shared cells ``(lo, end)`` of two boxes, or None."""
    lo = [max(a[0][g], b[0][g]) for g in range(3)]
    end = [min(a[1][g], b[1][g]) for g in range(3)]
    return (lo, end) if all(e > s for s, e in zip(lo, end, strict=True)) else None


def off_rank_bytes(src: cudecomp.PencilInfo, dst: cudecomp.PencilInfo, itemsize: int) -> int:
    """Bytes of this rank's source cells that belong to another rank's destination."""
    a, b = box_of(src), box_of(dst)
    kept = overlap(a, b)
    stay = int(np.prod([e - s for s, e in zip(*kept, strict=True)])) if kept else 0
    cells = int(np.prod([e - s for s, e in zip(*a, strict=True)]))
    return (cells - stay) * itemsize


class HandWritten:
    """A move between two layouts of host arrays as users write it by hand.

    One ``MPI_Alltoallw`` with subarray datatypes, or a gather to rank 0 and a scatter of
    the new layout.
    """

    def __init__(self, comm: MPI.Comm, gdims: tuple[int, int, int], src: cudecomp.PencilInfo, dst: cudecomp.PencilInfo, dtype: Any) -> None:
        self.comm, self.gdims, self.dtype = comm, gdims, np.dtype(dtype)
        self.src, self.dst = src, dst
        self.mpi_type = MPI_TYPES[_data_type(self.dtype)]
        boxes = comm.allgather((box_of(src), box_of(dst)))
        self.src_boxes, self.dst_boxes = [b[0] for b in boxes], [b[1] for b in boxes]
        n = comm.size
        self.send_types = [self._subarray(src, overlap(box_of(src), self.dst_boxes[j])) for j in range(n)]
        self.recv_types = [self._subarray(dst, overlap(self.src_boxes[j], box_of(dst))) for j in range(n)]
        self.a = np.ones(src.array_shape, self.dtype)
        self.b = np.zeros(dst.array_shape, self.dtype)
        self.whole = np.empty(gdims[::-1], self.dtype) if comm.rank == 0 else None

    def _subarray(self, info: cudecomp.PencilInfo, cells: tuple[list[int], list[int]] | None) -> Any:
        """Return the MPI datatype of ``cells`` (global ``(lo, end)``) in this rank's array of ``info``."""
        if cells is None:
            return self.mpi_type.Create_contiguous(0).Commit()
        shape = list(info.array_shape)
        # Array axis k (C order, slowest first) holds global axis order[2 - k].
        sub = [cells[1][info.order[2 - k]] - cells[0][info.order[2 - k]] for k in range(3)]
        start = [cells[0][info.order[2 - k]] - info.lo[2 - k] + info.halo_extents[info.order[2 - k]] for k in range(3)]
        return self.mpi_type.Create_subarray(shape, sub, start).Commit()

    def alltoallw(self) -> None:
        """One ``MPI_Alltoallw`` from the source array into the destination array."""
        n = self.comm.size
        ones, zeros = [1] * n, [0] * n
        self.comm.Alltoallw([self.a, (ones, zeros), self.send_types], [self.b, (ones, zeros), self.recv_types])

    def gather_scatter(self) -> None:
        """Every rank's cells to rank 0, stitched into the global array, then cut for the new layout and scattered."""
        mine = np.ascontiguousarray(self.a[self.src.interior_slices].transpose(self.src.to_global_axes))
        parts = self.comm.gather(mine, root=0)
        outs = None
        if self.whole is not None and parts is not None:
            for (lo, end), p in zip(self.src_boxes, parts, strict=True):
                self.whole[lo[2] : end[2], lo[1] : end[1], lo[0] : end[0]] = p
            outs = [np.ascontiguousarray(self.whole[lo[2] : end[2], lo[1] : end[1], lo[0] : end[0]]) for lo, end in self.dst_boxes]
        got = self.comm.scatter(outs, root=0)
        self.b[self.dst.interior_slices] = got.transpose(np.argsort(self.dst.to_global_axes))

    def close(self) -> None:
        """Free the datatypes."""
        for t in (*self.send_types, *self.recv_types):
            t.Free()


def _data_type(dtype: np.dtype) -> cudecomp.DataType:
    return {
        np.dtype(np.float32): cudecomp.DataType.FLOAT,
        np.dtype(np.float64): cudecomp.DataType.DOUBLE,
        np.dtype(np.complex64): cudecomp.DataType.FLOAT_COMPLEX,
        np.dtype(np.complex128): cudecomp.DataType.DOUBLE_COMPLEX,
    }[np.dtype(dtype)]


def brick_counts(n: int) -> tuple[int, int, int]:
    """Return the most cubic 3-D grid of ``n`` ranks."""
    best = (n, 1, 1)
    for a in range(1, n + 1):
        for b in range(1, n // a + 1):
            if n % (a * b) == 0:
                c = n // (a * b)
                if max(a, b, c) - min(a, b, c) < max(best) - min(best):
                    best = (a, b, c)
    return best


def brick(gdims: tuple[int, int, int], n: int, rank: int) -> BoxLayout:
    """Return the box of ``rank`` among the bricks of ``gdims`` over ``n`` ranks (X fastest among the bricks)."""
    counts = brick_counts(n)
    coords = (rank % counts[0], rank // counts[0] % counts[1], rank // (counts[0] * counts[1]))
    lo = [gdims[g] * coords[g] // counts[g] for g in range(3)]
    hi = [gdims[g] * (coords[g] + 1) // counts[g] - 1 for g in range(3)]
    return BoxLayout(lo, hi)


def mpi4py_fft_ms(s: Session, case: Case) -> float | None:
    """Milliseconds of mpi4py-fft's ``Pencil.transfer`` from X-aligned to Z-aligned pencils (None without it, or on GPU)."""
    if not cudecomp.CPU_ONLY or importlib.util.find_spec("mpi4py_fft") is None:
        return None
    from mpi4py_fft.pencil import Pencil, Subcomm  # type: ignore[import-not-found]

    shape = case.gdims[::-1]  # (Z, Y, X): X-aligned is axis 2, Z-aligned axis 0
    subcomms = Subcomm(s.comm, [0, 0, 1])
    try:
        px = Pencil(subcomms, shape, axis=2)
        pz = px.pencil(0)
        transfer = px.transfer(pz, case.np_dtype)
        a = np.ones(px.subshape, case.np_dtype)
        b = np.zeros(pz.subshape, case.np_dtype)
        med, _ = s.time(functools.partial(transfer.forward, a, b))
        transfer.destroy()
    finally:
        subcomms.destroy()
    return med * 1e3


def redistribution_rows(s: Session, case: Case, bname: str) -> list[Row]:
    """Time the ``--ops redistribute`` rows of ``case`` on backend ``bname`` (collective)."""
    comm, handle, m = s.comm, s.handle, s.xp.m
    backend = TransposeCommBackend[bname]
    rows: list[Row] = []
    try:
        grid = handle.create_grid(config(case.gdims, case.pdims, backend, False))
    except cudecomp.CudecompError as e:
        return [case.row("rd-xy", bname, False, note=f"skipped: {type(e).__name__}: {e}")]
    pr, pc = case.pdims
    other_pdims = (pc, pr) if pc != pr else (1, pr * pc)
    other = handle.create_grid(config(case.gdims, other_pdims, backend, False)) if other_pdims != case.pdims else None
    try:
        infos = [grid.get_pencil_info(a) for a in range(3)]
        if comm.allreduce(any(i.size == 0 for i in infos), op=MPI.LOR):
            return [case.row("rd-xy", bname, False, note="skipped: some rank owns no cells of a pencil")]
        x, y, z = (m.ones(i.array_shape, case.np_dtype) for i in infos)

        def timed_row(op: str, fn: Callable[[], object], src: Any, dst: Any, base: dict[str, float]) -> Row:
            med, mn = s.time(fn)
            off = off_rank_bytes(src, dst, case.itemsize)
            distributed = comm.allreduce(off > 0, op=MPI.LOR)
            row = s.measured_row(case.row(op, bname, False), med, mn, off, src.size * case.itemsize, distributed)
            row.baseline = {**base, **{f"ratio_vs_{k[:-3]}": med * 1e3 / v for k, v in base.items() if v > 0}}
            return row

        # rd-xy: the general path between a transpose's pencils, beside the transpose.
        t_xy, _ = s.time(functools.partial(grid.transpose_x_to_y, x, y))
        with handle.create_redistribution(grid.pencil(0), grid.pencil(1)) as r:
            rows.append(timed_row("rd-xy", functools.partial(r.run, x, y), infos[0], infos[1], {"transpose_ms": t_xy * 1e3}))
        # rd-xz: one exchange beside two, and beside mpi4py-fft.
        t_yz, _ = s.time(functools.partial(grid.transpose_y_to_z, y, z))
        base = {"xy_then_yz_ms": (t_xy + t_yz) * 1e3}
        peer = mpi4py_fft_ms(s, case)
        if peer is not None:
            base["mpi4py_fft_ms"] = peer
        rows.append(timed_row("rd-xz", functools.partial(grid.transpose_x_to_z, x, z), infos[0], infos[2], base))
        # rd-grid and rd-brick, beside what users write by hand (host memory).
        sides: list[tuple[str, Any, Any]] = []
        if other is not None:
            sides.append(("rd-grid", grid.pencil(0), other.pencil(0)))
        sides.append(("rd-brick", brick(case.gdims, comm.size, comm.rank), grid.pencil(0)))
        for op, src, dst in sides:
            with handle.create_redistribution(src, dst) as r:
                a = m.ones(r.input_info.array_shape, case.np_dtype)
                b = m.zeros(r.output_info.array_shape, case.np_dtype)
                hand: dict[str, float] = {}
                if cudecomp.CPU_ONLY:
                    by_hand = HandWritten(comm, case.gdims, r.input_info, r.output_info, case.np_dtype)
                    hand["alltoallw_ms"] = s.time(by_hand.alltoallw)[0] * 1e3
                    hand["gather_scatter_ms"] = s.time(by_hand.gather_scatter)[0] * 1e3
                    by_hand.close()
                rows.append(timed_row(op, functools.partial(r.run, a, b), r.input_info, r.output_info, hand))
                del a, b
        del x, y, z
    finally:
        if other is not None:
            other.destroy()
        grid.destroy()
    return rows
