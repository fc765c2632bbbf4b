"""Transpose correctness: every backend, layout and dtype against the global-index oracle.

Runs on any number of ranks (serially, or under ``mpiexec -n N``); process grids are
all factorisations of the communicator size.
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import handle_with, requires_cpu_variant, requires_data_path
from cudecomp import DataType, RankOrder, TransposeCommBackend
from oracle import ALL_CONTIGUOUS, NUMPY_DTYPES, TRANSPOSES, device, factor_pairs, interior, make, to_host, variant_transpose_backends, xp

pytestmark = [pytest.mark.mpi, requires_data_path()]

OPS = TRANSPOSES
BACKENDS = variant_transpose_backends()
DTYPES = list(NUMPY_DTYPES)
NRANKS = MPI.COMM_WORLD.size
OUT_SENTINEL = -3.0
ZERO3 = (0, 0, 0)


@dataclasses.dataclass(frozen=True)
class Case:
    """One transpose configuration, run through all four transposes."""

    gdims: tuple[int, int, int]
    pdims: tuple[int, int]
    backend: TransposeCommBackend = TransposeCommBackend.MPI_P2P
    dtype: DataType = DataType.DOUBLE
    contiguous: tuple[bool, bool, bool] = (False, False, False)
    mem_order: tuple[tuple[int, int, int], ...] | None = None
    rank_order: RankOrder = RankOrder.DEFAULT
    gdims_dist: tuple[int, int, int] = ZERO3
    in_place: bool = False
    in_halo: tuple[int, int, int] = ZERO3
    out_halo: tuple[int, int, int] = ZERO3
    in_pad: tuple[int, int, int] = ZERO3
    out_pad: tuple[int, int, int] = ZERO3
    explicit_dtype: bool = False
    allocate_out: bool = False
    explicit_work: bool = False

    def config(self) -> cudecomp.GridDescConfig:
        cfg = cudecomp.GridDescConfig()
        cfg.gdims = self.gdims
        cfg.gdims_dist = self.gdims_dist
        cfg.pdims = self.pdims
        cfg.transpose_comm_backend = self.backend
        cfg.transpose_axis_contiguous = self.contiguous
        if self.mem_order is not None:
            cfg.transpose_mem_order = self.mem_order
        cfg.rank_order = self.rank_order
        return cfg

    def has_empty_pencil(self, axis: int) -> bool:
        """True when some rank owns no cells of the ``axis``-pencil (reference §1.7)."""
        dist = [d if all(self.gdims_dist) else g for d, g in zip(self.gdims_dist, self.gdims, strict=True)]
        first, second = [ax for ax in range(3) if ax != axis]
        return self.pdims[0] > dist[first] or self.pdims[1] > dist[second]


def run_case(handle: cudecomp.Handle, case: Case) -> None:
    grid = handle.create_grid(case.config())
    try:
        work = None
        if case.explicit_work:
            work = xp.zeros(grid.get_transpose_workspace_size() * cudecomp.get_data_type_size(case.dtype), np.uint8)
        for op, a, b in OPS:
            if case.has_empty_pencil(a) or case.has_empty_pencil(b):
                info_in = grid.get_pencil_info(a)
                info_out = grid.get_pencil_info(b)
                x = xp.zeros(info_in.array_shape, NUMPY_DTYPES[case.dtype])
                with pytest.raises(cudecomp.NotSupportedError):
                    getattr(grid, op)(x, xp.zeros(info_out.array_shape, x.dtype))
            else:
                run_op(grid, case, op, a, b, work)
    finally:
        grid.destroy()


def run_op(grid: cudecomp.GridDesc, case: Case, op: str, a: int, b: int, work: np.ndarray | None) -> None:
    info_in = grid.get_pencil_info(a, case.in_halo, case.in_pad)
    info_out = grid.get_pencil_info(b, case.out_halo, case.out_pad)
    x = device(make(info_in, case.gdims, case.dtype))
    expected = make(info_out, case.gdims, case.dtype, OUT_SENTINEL)
    kwargs = dict(
        input_halo_extents=case.in_halo,
        output_halo_extents=case.out_halo,
        input_padding=case.in_pad,
        output_padding=case.out_pad,
        work=work,
    )
    if case.explicit_dtype:
        kwargs["dtype"] = case.dtype
    fn = getattr(grid, op)
    what = f"{op} {case}"
    if case.in_place:
        buf = xp.full(max(info_in.size, info_out.size), OUT_SENTINEL, NUMPY_DTYPES[case.dtype])
        inp = buf[: info_in.size].reshape(info_in.array_shape)
        inp[...] = x
        out = buf[: info_out.size].reshape(info_out.array_shape)
        result = fn(inp, out, **kwargs)
        assert result is out
        mask = interior(info_out)
        assert np.array_equal(to_host(out)[mask], expected[mask]), what
    elif case.allocate_out:
        result = fn(x, **kwargs)
        assert result.shape == info_out.array_shape and result.dtype == NUMPY_DTYPES[case.dtype]
        mask = interior(info_out)
        assert np.array_equal(to_host(result)[mask], expected[mask]), what
    else:
        before = to_host(x).copy()
        out = xp.full(info_out.array_shape, OUT_SENTINEL, NUMPY_DTYPES[case.dtype])
        result = fn(x, out, **kwargs)
        assert result is out
        assert np.array_equal(to_host(out), expected), what  # halos and padding untouched
        assert np.array_equal(to_host(x), before), f"{what}: input modified"


def fixed_cases() -> list[Case]:
    cases = []
    pdims_all = factor_pairs(NRANKS)
    # Every backend x axis-contiguous combination x rank order x aliasing on a 9x10x11 grid.
    for pdims, backend, contiguous, order, in_place in itertools.product(
        pdims_all, BACKENDS, ALL_CONTIGUOUS, (RankOrder.ROW_MAJOR, RankOrder.COL_MAJOR), (False, True)
    ):
        dtype = DTYPES[(sum(contiguous) + in_place + backend) % 4]
        cases.append(Case((9, 10, 11), pdims, backend, dtype, contiguous, rank_order=order, in_place=in_place))
    # Halos and padding on input and output, explicit memory orders (X and Z share one).
    perms = list(itertools.permutations(range(3)))
    for i, (xz, y) in enumerate(itertools.product(perms, perms)):
        cases.append(
            Case(
                (9, 10, 11),
                pdims_all[i % len(pdims_all)],
                BACKENDS[i % 3],
                DTYPES[i % 4],
                mem_order=(xz, y, xz),
                in_halo=(1, 2, 1),
                out_halo=(2, 1, 1),
                in_pad=(1, 1, 2),
                out_pad=(2, 1, 1),
            )
        )
    # Awkward extents: primes, one-thick, gdims_dist < gdims, N < P (empty pencils).
    awkward = [
        ((7, 5, 3), ZERO3),
        ((1, 7, 5), ZERO3),
        ((6, 1, 5), ZERO3),
        ((5, 6, 1), ZERO3),
        ((9, 10, 11), (8, 9, 10)),
        ((13, 4, 7), (12, 3, 6)),
        ((2, 2, 17), ZERO3),
        ((17, 3, 2), ZERO3),
    ]
    for (gdims, dist), pdims, backend in itertools.product(awkward, pdims_all, BACKENDS):
        cases.append(Case(gdims, pdims, backend, DataType.FLOAT_COMPLEX, gdims_dist=dist, in_halo=(1, 0, 1)))
    # Output allocation, explicit dtype, explicit workspace.
    for pdims, backend in itertools.product(pdims_all, BACKENDS):
        cases.append(Case((8, 6, 10), pdims, backend, DataType.FLOAT, allocate_out=True, explicit_dtype=True))
        cases.append(Case((8, 6, 10), pdims, backend, DataType.DOUBLE_COMPLEX, explicit_work=True, out_halo=(1, 1, 1)))
    return cases


def random_cases(n: int, seed: int) -> list[Case]:
    rng = random.Random(seed * 1000 + NRANKS)
    pdims_all = factor_pairs(NRANKS)

    def triple(hi: int) -> tuple[int, int, int]:
        return (rng.randint(0, hi), rng.randint(0, hi), rng.randint(0, hi))

    cases = []
    for _ in range(n):
        gdims = (rng.randint(1, 14), rng.randint(1, 14), rng.randint(1, 14))
        dist = ZERO3
        if rng.random() < 0.2:
            dist = tuple(max(1, g - rng.randint(0, 2)) for g in gdims)  # type: ignore[assignment]
        mem_order = None
        contiguous = (rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.5)
        if rng.random() < 0.25:
            perms = list(itertools.permutations(range(3)))
            mem_order = tuple(rng.choice(perms) for _ in range(3))
        in_place = rng.random() < 0.3
        cases.append(
            Case(
                gdims,
                rng.choice(pdims_all),
                rng.choice(BACKENDS),
                rng.choice(DTYPES),
                contiguous,
                mem_order,
                rng.choice(list(RankOrder)),
                dist,  # type: ignore[arg-type]
                in_place,
                triple(2),
                triple(2),
                triple(2),
                triple(2),
                explicit_dtype=rng.random() < 0.5,
                allocate_out=not in_place and rng.random() < 0.2,
                explicit_work=rng.random() < 0.3,
            )
        )
    return cases


@pytest.mark.parametrize("case", fixed_cases(), ids=str)
def test_fixed(handle: cudecomp.Handle, case: Case) -> None:
    run_case(handle, case)


# The random sweep's 220 cases are spread over the rank counts scripts/test.sh runs (the
# serial pass and 2, 3, 4 and 6 ranks), drawn afresh for each count.
SWEEP_CASES = 220
SWEEP_RANK_COUNTS = (1, 2, 3, 4, 6)


@pytest.mark.parametrize(
    "case", random_cases(SWEEP_CASES // len(SWEEP_RANK_COUNTS), seed=1), ids=lambda c: f"{c.gdims}-{c.pdims}-{c.backend.name}"
)
def test_random_sweep(handle: cudecomp.Handle, case: Case) -> None:
    run_case(handle, case)


def test_in_place_slab_is_no_op(handle: cudecomp.Handle) -> None:
    """With P_rows == 1 and default layout, in-place X->Y moves nothing (upstream's slab case)."""
    case = Case((6, 6, max(NRANKS, 2) * 2), (1, NRANKS), in_place=True)
    grid = handle.create_grid(case.config())
    try:
        info = grid.get_pencil_info(0)
        x = device(make(info, case.gdims, case.dtype))
        snapshot = to_host(x).copy()
        assert grid.transpose_x_to_y(x, x) is x
        assert np.array_equal(to_host(x), snapshot)
    finally:
        grid.destroy()


@requires_cpu_variant()
def test_opaque_storage_with_explicit_dtype(handle: cudecomp.Handle) -> None:
    case = Case((9, 10, 11), factor_pairs(NRANKS)[-1])
    grid = handle.create_grid(case.config())
    try:
        ia, ib = grid.get_pencil_info(0), grid.get_pencil_info(1)
        x = make(ia, case.gdims, DataType.DOUBLE_COMPLEX)
        out = np.zeros(ib.array_shape, dtype="V16")
        grid.transpose_x_to_y(x.view("V16"), out, dtype=DataType.DOUBLE_COMPLEX)
        assert np.array_equal(out.view(np.complex128), make(ib, case.gdims, DataType.DOUBLE_COMPLEX))
    finally:
        grid.destroy()


@pytest.mark.parametrize("library", [False, True], ids=["user-arrays", "library-arrays"])
@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_own_cells_left_to_the_caller(backend: TransposeCommBackend, library: bool) -> None:
    """``own_cells=False``: every cell from another rank lands, this rank's own are left as they were.

    Between ``empty_pencil`` arrays DIRECT runs its single copies; in place is refused on
    every rank with the handle still usable, and a non-bool is a TypeError.
    """
    from cudecomp import _cudecomp as ext

    # Small library arrays exported too, and single copies on GPUs.
    with handle_with(CUDECOMP_SHARED_ARRAY_MIN_BYTES="0", CUDECOMP_SINGLE_COPY="1") as handle:
        before = ext._single_copy_count()
        own_cells_cases(handle, backend, library)
    single = library and backend == TransposeCommBackend.DIRECT and NRANKS > 1
    assert (ext._single_copy_count() > before) == single


def own_cells_cases(handle: cudecomp.Handle, backend: TransposeCommBackend, library: bool) -> None:
    """The cases of :func:`test_own_cells_left_to_the_caller` on ``handle``."""
    for pdims in factor_pairs(NRANKS):
        case = Case((9, 10, 11), pdims, backend)
        grid = handle.create_grid(case.config())
        try:
            for op, a, b in OPS:
                info_in, info_out = grid.get_pencil_info(a), grid.get_pencil_info(b)
                x = device(make(info_in, case.gdims, case.dtype))
                expected = make(info_out, case.gdims, case.dtype, OUT_SENTINEL)
                own = np.isin(expected, make(info_in, case.gdims, case.dtype)[interior(info_in)]) & interior(info_out)
                expected[own] = OUT_SENTINEL
                out = grid.empty_pencil(b, np.float64) if library else xp.empty(info_out.array_shape, np.float64)
                out[...] = OUT_SENTINEL
                assert getattr(grid, op)(x, out, own_cells=False) is out
                assert np.array_equal(to_host(out), expected), f"{op} {case}"
            info_x, info_y = grid.get_pencil_info(0), grid.get_pencil_info(1)
            buf = xp.zeros(max(info_x.size, info_y.size), np.float64)
            inp, out = buf[: info_x.size].reshape(info_x.array_shape), buf[: info_y.size].reshape(info_y.array_shape)
            with pytest.raises(cudecomp.InvalidUsageError, match="own_cells=False: expected an out-of-place"):
                grid.transpose_x_to_y(inp, out, own_cells=False)
            with pytest.raises(TypeError):
                grid.transpose_x_to_y(inp, out, own_cells=1)  # type: ignore[arg-type]
            run_op(grid, case, "transpose_x_to_y", 0, 1, None)  # still usable
        finally:
            grid.destroy()
