"""Redistributions between any two decompositions against the global-index oracle.

Random pairs of layouts (pencils of two random grids with halos, padding, memory orders
and rank orders; random bricks; gather to and scatter from a random rank), every backend
of the variant, every dtype, in place where one buffer holds both arrays; a
redistribution between a transpose's pencils against the transpose itself; and the
layouts that do not tile the grid, raised on every rank.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import random
import warnings
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_data_path
from cudecomp import BoxLayout, DataType, RankOrder, TransposeCommBackend
from oracle import ALL_CONTIGUOUS, NUMPY_DTYPES, device, factor_pairs, interior, make, to_host, variant_transpose_backends, xp

pytestmark = [pytest.mark.mpi, requires_data_path()]

COMM = MPI.COMM_WORLD
NRANKS = COMM.size
BACKENDS = variant_transpose_backends()
OUT_SENTINEL = -3.0


@dataclasses.dataclass(frozen=True)
class Grid:
    """A grid to take a pencil of: process grid, layout, rank order, the pencil's axis,
    halos and padding."""

    pdims: tuple[int, int]
    contiguous: tuple[bool, bool, bool]
    rank_order: RankOrder
    axis: int
    halo: tuple[int, int, int]
    padding: tuple[int, int, int]

    def config(self, gdims: tuple[int, int, int], backend: TransposeCommBackend) -> cudecomp.GridDescConfig:
        cfg = cudecomp.GridDescConfig()
        cfg.gdims, cfg.pdims = gdims, self.pdims
        cfg.transpose_axis_contiguous = self.contiguous
        cfg.rank_order = self.rank_order
        cfg.transpose_comm_backend = backend
        return cfg


@dataclasses.dataclass(frozen=True)
class Boxes:
    """One box per rank, ``(lo, hi)`` inclusive, global order."""

    boxes: tuple[tuple[tuple[int, int, int], tuple[int, int, int]], ...]

    def layout(self) -> BoxLayout:
        lo, hi = self.boxes[COMM.rank]
        return BoxLayout(lo, hi)


Side = Grid | Boxes


def split(n: int, parts: int, rng: random.Random) -> list[tuple[int, int]]:
    """``n`` cells cut into ``parts`` runs ``(lo, len)`` at random points (runs may be empty)."""
    cuts = sorted(rng.randint(0, n) for _ in range(parts - 1))
    edges = [0, *cuts, n]
    return [(edges[i], edges[i + 1] - edges[i]) for i in range(parts)]


def bricks(gdims: tuple[int, int, int], rng: random.Random) -> Boxes:
    """A random brick decomposition: ``px * py * pz = NRANKS`` bricks of random extents,
    dealt to the ranks in a random order."""
    triples = [(a, b, NRANKS // (a * b)) for a in range(1, NRANKS + 1) for b in range(1, NRANKS + 1) if NRANKS % (a * b) == 0]
    counts = rng.choice(triples)
    runs = [split(g, p, rng) for g, p in zip(gdims, counts, strict=True)]
    boxes = []
    for (x0, nx), (y0, ny), (z0, nz) in itertools.product(*runs):
        boxes.append(((x0, y0, z0), (x0 + nx - 1, y0 + ny - 1, z0 + nz - 1)))
    rng.shuffle(boxes)
    return Boxes(tuple(boxes))


def on_one_rank(gdims: tuple[int, int, int], root: int) -> Boxes:
    """Everything on ``root`` (gather's destination, scatter's source)."""
    whole = ((0, 0, 0), (gdims[0] - 1, gdims[1] - 1, gdims[2] - 1))
    empty = ((0, 0, 0), (-1, -1, -1))
    return Boxes(tuple(whole if r == root else empty for r in range(NRANKS)))


def random_grid(rng: random.Random) -> Grid:
    return Grid(
        rng.choice(factor_pairs(NRANKS)),
        rng.choice(ALL_CONTIGUOUS),
        rng.choice(list(RankOrder)),
        rng.randrange(3),
        (rng.randint(0, 2), rng.randint(0, 1), rng.randint(0, 2)),
        (rng.randint(0, 1), 0, rng.randint(0, 2)),
    )


def random_side(gdims: tuple[int, int, int], kind: str, rng: random.Random) -> Side:
    if kind == "pencil":
        return random_grid(rng)
    if kind == "bricks":
        return bricks(gdims, rng)
    return on_one_rank(gdims, rng.randrange(NRANKS))


@dataclasses.dataclass(frozen=True)
class Case:
    gdims: tuple[int, int, int]
    src: Side
    dst: Side
    backend: TransposeCommBackend
    dtype: DataType
    in_place: bool

    def __str__(self) -> str:
        kind = lambda s: f"{s.axis}-pencil {s.pdims}" if isinstance(s, Grid) else "boxes"  # noqa: E731
        return f"{self.gdims} {kind(self.src)} -> {kind(self.dst)} {self.backend.name} {self.dtype.name}"


KINDS = ["pencil", "bricks", "root"]


def random_cases(n: int) -> list[Case]:
    rng = random.Random(7000 + NRANKS)
    cases = []
    for i in range(n):
        gdims = (rng.randint(1, 12), rng.randint(1, 12), rng.randint(1, 12))
        # Every ordered pair of kinds, in turn; the rest at random.
        src_kind, dst_kind = KINDS[i % 3], KINDS[(i // 3) % 3]
        cases.append(
            Case(
                gdims,
                random_side(gdims, src_kind, rng),
                random_side(gdims, dst_kind, rng),
                rng.choice(BACKENDS),
                rng.choice(list(NUMPY_DTYPES)),
                rng.random() < 0.25,
            )
        )
    return cases


def layout(handle: cudecomp.Handle, side: Side, gdims: tuple[int, int, int], backend: TransposeCommBackend, grids: list[Any]) -> Any:
    if isinstance(side, Boxes):
        return side.layout()
    g = handle.create_grid(side.config(gdims, backend))
    grids.append(g)
    return g.pencil(side.axis, side.halo, side.padding)


def run_case(handle: cudecomp.Handle, case: Case) -> None:
    grids: list[Any] = []
    try:
        src = layout(handle, case.src, case.gdims, case.backend, grids)
        dst = layout(handle, case.dst, case.gdims, case.backend, grids)
        with handle.create_redistribution(src, dst, backend=case.backend) as r:
            info_in, info_out = r.input_info, r.output_info
            x = make(info_in, case.gdims, case.dtype)
            expected = make(info_out, case.gdims, case.dtype, OUT_SENTINEL)
            dt = NUMPY_DTYPES[case.dtype]
            if case.in_place:
                buf = xp.full(max(info_in.size, info_out.size), OUT_SENTINEL, dt)
                inp = buf[: info_in.size].reshape(info_in.array_shape)
                inp[...] = device(x)
                out = buf[: info_out.size].reshape(info_out.array_shape)
                assert r.run(inp, out) is out
                mask = interior(info_out)
                assert np.array_equal(to_host(out)[mask], expected[mask]), str(case)
            else:
                inp = device(x)
                out = xp.full(info_out.array_shape, OUT_SENTINEL, dt)
                assert r.run(inp, out) is out
                assert np.array_equal(to_host(out), expected), f"{case}: cells, or halos and padding left alone"
                assert np.array_equal(to_host(inp), x), f"{case}: input modified"
            # Run again, into a fresh allocated output (the plan is reused).
            if not case.in_place and (cudecomp.CPU_ONLY or xp is not np):
                again = r.run(inp)
                mask = interior(info_out)
                assert np.array_equal(to_host(again)[mask], expected[mask]), f"{case}: second run"
    finally:
        for g in grids:
            g.destroy()


@pytest.mark.parametrize("case", random_cases(40), ids=str)
def test_random_layout_pairs(handle: cudecomp.Handle, case: Case) -> None:
    run_case(handle, case)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_between_a_transposes_pencils_it_moves_what_the_transpose_moves(handle: cudecomp.Handle, backend: TransposeCommBackend) -> None:
    gdims = (9, 10, 11)
    halo_in, halo_out, pad_in, pad_out = (1, 0, 2), (0, 1, 1), (0, 1, 0), (1, 0, 1)
    for pdims in factor_pairs(NRANKS):
        cfg = Grid(pdims, (True, False, True), RankOrder.ROW_MAJOR, 0, (0, 0, 0), (0, 0, 0)).config(gdims, backend)
        with handle.create_grid(cfg) as g:
            for op, a, b in [("transpose_x_to_y", 0, 1), ("transpose_y_to_z", 1, 2), ("transpose_z_to_x", 2, 0)]:
                info_in = g.get_pencil_info(a, halo_in, pad_in)
                info_out = g.get_pencil_info(b, halo_out, pad_out)
                x = device(make(info_in, gdims, DataType.DOUBLE))
                by_transpose = xp.full(info_out.array_shape, OUT_SENTINEL)
                getattr(g, op)(
                    x,
                    by_transpose,
                    input_halo_extents=halo_in,
                    output_halo_extents=halo_out,
                    input_padding=pad_in,
                    output_padding=pad_out,
                )
                with handle.create_redistribution(g.pencil(a, halo_in, pad_in), g.pencil(b, halo_out, pad_out)) as r:
                    assert r.backend == backend
                    by_redistribution = r.run(x, xp.full(info_out.array_shape, OUT_SENTINEL))
                assert np.array_equal(to_host(by_redistribution), to_host(by_transpose)), (pdims, op)


def test_gather_and_scatter_round_trip(handle: cudecomp.Handle) -> None:
    gdims = (7, 6, 5)
    root = NRANKS - 1
    whole = BoxLayout.whole(gdims) if COMM.rank == root else BoxLayout.empty()
    assert whole.array_shape == ((5, 6, 7) if COMM.rank == root else (0, 0, 0))
    cfg = Grid(factor_pairs(NRANKS)[-1], (False, False, False), RankOrder.ROW_MAJOR, 0, (0, 0, 0), (0, 0, 0))
    with handle.create_grid(cfg.config(gdims, TransposeCommBackend.MPI_P2P)) as g:
        y = g.pencil(1)
        with handle.create_redistribution(y, whole) as gather, handle.create_redistribution(whole, y) as scatter:
            local = device(make(g.get_pencil_info(1), gdims, DataType.DOUBLE))
            full = gather.run(local)
            if COMM.rank == root:
                assert np.array_equal(to_host(full), make(gather.output_info, gdims, DataType.DOUBLE))
            else:
                assert tuple(full.shape) == (0, 0, 0)
            back = scatter.run(full)
            assert np.array_equal(to_host(back), to_host(local))
            assert gather.gdims == gdims and gather.get_workspace_size() >= 0


def boxes_of(rows: list[tuple[tuple[int, int, int], tuple[int, int, int]]]) -> BoxLayout:
    """This rank's box of a list of one box per rank (the last one for extra ranks)."""
    lo, hi = rows[min(COMM.rank, len(rows) - 1)]
    return BoxLayout(lo, hi)


def slabs(gdims: tuple[int, int, int]) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """Z slabs, one per rank (some empty where Z is short)."""
    out = []
    for lo, n in split_even(gdims[2], NRANKS):
        out.append(((0, 0, lo), (gdims[0] - 1, gdims[1] - 1, lo + n - 1)))
    return out


def split_even(n: int, parts: int) -> list[tuple[int, int]]:
    return [(n * i // parts, n * (i + 1) // parts - n * i // parts) for i in range(parts)]


@pytest.mark.parametrize(
    "change, message",
    [
        ("gap", "some cells belong to no rank"),
        ("overlap", "overlap in"),
        ("outside", "reaches outside the global grid"),
    ],
)
def test_layouts_that_do_not_tile_raise_on_every_rank(handle: cudecomp.Handle, change: str, message: str) -> None:
    gdims = (4, 5, 2 * NRANKS)
    rows = slabs(gdims)
    bad = list(rows)
    (x0, y0, z0), (x1, y1, z1) = bad[0]
    if change == "gap":
        bad[0] = ((x0, y0, z0), (x1, y1 - 1, z1))
    elif change == "overlap":
        bad[0] = ((x0, y0, z0), (x1, y1, z1 + 1)) if NRANKS > 1 else ((x0, y0, z0), (x1, y1, z1))
    else:
        bad[0] = ((x0, y0, z0), (x1 + 1, y1, z1))
    if change == "overlap" and NRANKS == 1:
        pytest.skip("one rank's box cannot overlap another's")
    cfg = Grid(factor_pairs(NRANKS)[0], (False, False, False), RankOrder.ROW_MAJOR, 0, (0, 0, 0), (0, 0, 0))
    with handle.create_grid(cfg.config(gdims, TransposeCommBackend.MPI_P2P)) as g:
        with pytest.raises(cudecomp.InvalidUsageError, match=message):
            handle.create_redistribution(g.pencil(0), boxes_of(bad))
        # The handle and grid still work: the same move with the good boxes.
        with handle.create_redistribution(g.pencil(0), boxes_of(rows)) as r:
            got = r.run(device(make(r.input_info, gdims, DataType.DOUBLE)))
            assert np.array_equal(to_host(got), make(r.output_info, gdims, DataType.DOUBLE))


@pytest.mark.mpi(min_ranks=2)
def test_ranks_passing_different_layouts_raise_on_every_rank(handle: cudecomp.Handle) -> None:
    gdims = (6, 6, 6)
    cfg = Grid(factor_pairs(NRANKS)[-1], (False, False, False), RankOrder.ROW_MAJOR, 0, (0, 0, 0), (0, 0, 0))
    with handle.create_grid(cfg.config(gdims, TransposeCommBackend.MPI_P2P)) as g:
        axis = 1 if COMM.rank == NRANKS - 1 else 2
        with pytest.raises(cudecomp.InvalidUsageError, match="destination axis"):
            handle.create_redistribution(g.pencil(0), g.pencil(axis))
        # One rank passing a wrong type: it raises TypeError, the others InvalidUsageError.
        dst: Any = "z-pencil" if COMM.rank == 0 else g.pencil(2)
        with pytest.raises(TypeError if COMM.rank == 0 else cudecomp.InvalidUsageError):
            handle.create_redistribution(g.pencil(0), dst)
        with handle.create_redistribution(g.pencil(0), g.pencil(2)) as r:
            got = r.run(device(make(r.input_info, gdims, DataType.DOUBLE)))
            assert np.array_equal(to_host(got), make(r.output_info, gdims, DataType.DOUBLE))


def test_misuse_of_a_redistribution(handle: cudecomp.Handle, comm: MPI.Comm) -> None:
    gdims = (6, 5, 4)
    cfg = Grid(factor_pairs(NRANKS)[-1], (False, False, False), RankOrder.ROW_MAJOR, 0, (0, 0, 0), (0, 0, 0))
    with handle.create_grid(cfg.config(gdims, TransposeCommBackend.MPI_P2P)) as g:
        with pytest.raises(TypeError, match="PencilLayout"):
            handle.create_redistribution(g.pencil(0), object())
        with pytest.raises(TypeError, match="TransposeCommBackend"):
            handle.create_redistribution(g.pencil(0), g.pencil(1), backend=3)
        with pytest.raises(cudecomp.InvalidUsageError, match="axis"):
            g.pencil(3)
        with pytest.raises(cudecomp.InvalidUsageError, match="lo >= 0"):
            handle.create_redistribution(g.pencil(0), BoxLayout((-1, 0, 0), (1, 1, 1)))
        with cudecomp.Handle(comm) as other:
            with pytest.raises(cudecomp.InvalidUsageError, match="another Handle"):
                other.create_redistribution(g.pencil(0), g.pencil(1))
        r = handle.create_redistribution(g.pencil(0), g.pencil(2))
        x = device(make(r.input_info, gdims, DataType.DOUBLE))
        with pytest.raises(cudecomp.InvalidUsageError, match="expected shape"):
            r.run(x[:1])
        assert r.get_workspace_size() > 0
        with pytest.raises(cudecomp.InvalidUsageError, match="work: expected at least"):
            r.run(x, work=xp.zeros(8, np.uint8))
        assert np.array_equal(to_host(r.run(x)), make(r.output_info, gdims, DataType.DOUBLE)), "still usable"
        r.destroy()
        with pytest.raises(cudecomp.InvalidUsageError, match="destroyed"):
            r.run(x)
        with pytest.raises(cudecomp.InvalidUsageError, match="destroyed"):
            r.destroy()
        leaked = handle.create_redistribution(g.pencil(0), g.pencil(1))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del leaked
            gc.collect()
        assert any(issubclass(w.category, ResourceWarning) for w in caught)


@pytest.mark.mpi(min_ranks=2)
@pytest.mark.checking
def test_one_ranks_bad_array_raises_on_every_rank(handle: cudecomp.Handle) -> None:
    """Checking mode (marked checking): rank 0's wrong input makes every rank raise, none waits."""
    gdims = (6, 6, 6)
    cfg = Grid(factor_pairs(NRANKS)[-1], (False, False, False), RankOrder.ROW_MAJOR, 0, (0, 0, 0), (0, 0, 0))
    with handle.create_grid(cfg.config(gdims, TransposeCommBackend.MPI_P2P)) as g:
        with handle.create_redistribution(g.pencil(0), g.pencil(2)) as r:
            x = device(make(r.input_info, gdims, DataType.DOUBLE))
            bad = xp.zeros((1, 1, 1)) if COMM.rank == 0 else x
            with pytest.raises(cudecomp.InvalidUsageError, match="expected shape" if COMM.rank == 0 else "rank"):
                r.run(bad)
            bad_dtype: Any = x.astype(np.float32) if COMM.rank == NRANKS - 1 else x
            with pytest.raises((cudecomp.InvalidUsageError, TypeError)):
                r.run(bad_dtype, dtype=DataType.DOUBLE)
            assert np.array_equal(to_host(r.run(x)), make(r.output_info, gdims, DataType.DOUBLE))
