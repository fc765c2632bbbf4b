"""Halo updates against the reference check of cuDecomp (reference §5).

After updating dims 0, 1 and 2 every non-padding cell holds the global index of its point,
wrapped along periodic dims; cells beyond a non-periodic boundary and padding cells keep
their initial value.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_data_path
from cudecomp import DataType, HaloCommBackend, RankOrder
from oracle import ALL_CONTIGUOUS, device, factor_pairs, make, to_host, variant_halo_backends, xp
from oracle import halo_expected as expected

pytestmark = [pytest.mark.mpi, requires_data_path()]

NRANKS = MPI.COMM_WORLD.size
GDIMS = (12, 13, 14)
HALO = (1, 2, 1)
BACKENDS = variant_halo_backends()
UPDATE = ("update_halos_x", "update_halos_y", "update_halos_z")


def config(pdims: tuple[int, int], backend: HaloCommBackend, **kw: object) -> cudecomp.GridDescConfig:
    cfg = cudecomp.GridDescConfig()
    cfg.gdims = GDIMS
    cfg.pdims = pdims
    cfg.halo_comm_backend = backend
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def cases() -> list[tuple]:
    out = []
    for n, (pdims, backend, axis, periods, order) in enumerate(
        itertools.product(
            factor_pairs(NRANKS),
            BACKENDS,
            range(3),
            list(itertools.product([False, True], repeat=3)),
            (RankOrder.ROW_MAJOR, RankOrder.COL_MAJOR),
        )
    ):
        padding = (1, 0, 2) if n % 2 else (0, 0, 0)
        out.append((pdims, backend, axis, periods, order, DataType(-1 - n % 4), ALL_CONTIGUOUS[n % 8], padding, n % 3 == 0))
    return out


@pytest.mark.parametrize("pdims, backend, axis, periods, order, dtype, contiguous, padding, explicit_work", cases())
def test_halo_reference(
    handle: cudecomp.Handle,
    pdims: tuple[int, int],
    backend: HaloCommBackend,
    axis: int,
    periods: tuple[bool, bool, bool],
    order: RankOrder,
    dtype: DataType,
    contiguous: tuple[bool, bool, bool],
    padding: tuple[int, int, int],
    explicit_work: bool,
) -> None:
    grid = handle.create_grid(config(pdims, backend, rank_order=order, transpose_axis_contiguous=contiguous))
    try:
        info = grid.get_pencil_info(axis, HALO, padding)
        data = device(make(info, GDIMS, dtype))
        work = None
        if explicit_work:
            work = xp.zeros(grid.get_halo_workspace_size(axis, HALO) * cudecomp.get_data_type_size(dtype), np.uint8)
        update = getattr(grid, UPDATE[axis])
        for dim in range(3):
            assert update(data, HALO, periods, dim, padding=padding, work=work) is None
        assert np.array_equal(to_host(data), expected(info, GDIMS, periods, dtype))
    finally:
        grid.destroy()


def test_workspace_shared_with_transposes(handle: cudecomp.Handle) -> None:
    """Automatic workspace: a halo update after a transpose (and back) reuses one buffer."""
    grid = handle.create_grid(config(factor_pairs(NRANKS)[0], HaloCommBackend.MPI))
    try:
        ix = grid.get_pencil_info(0)
        y = grid.transpose_x_to_y(device(make(ix, GDIMS, DataType.DOUBLE)))
        iy = grid.get_pencil_info(1, HALO)
        data = device(make(iy, GDIMS, DataType.DOUBLE))
        for dim in range(3):
            grid.update_halos_y(data, HALO, None, dim)
        assert np.array_equal(to_host(data), expected(iy, GDIMS, (False,) * 3, DataType.DOUBLE))
        assert y.shape == grid.get_pencil_info(1).array_shape
    finally:
        grid.destroy()


def test_zero_halos_are_a_no_op(handle: cudecomp.Handle) -> None:
    grid = handle.create_grid(config(factor_pairs(NRANKS)[0], HaloCommBackend.MPI))
    try:
        # The caller's array is checked even where nothing moves (upstream returns first).
        with pytest.raises(cudecomp.InvalidUsageError, match="expected a 3-dimensional array"):
            grid.update_halos_x(xp.zeros(3), (0, 0, 0), None, 0)
        wrong = xp.zeros((1, 2, 3), np.float32)
        with pytest.raises(cudecomp.InvalidUsageError, match="expected shape"):
            grid.update_halos_x(wrong, (0, 0, 0), None, 0)
        assert grid.update_halos_x(device(make(grid.get_pencil_info(0), GDIMS, DataType.FLOAT)), (0, 0, 0), None, 0) is None
        info = grid.get_pencil_info(0, (0, 2, 0))
        data = device(make(info, GDIMS, DataType.FLOAT))
        before = to_host(data).copy()
        grid.update_halos_x(data, (0, 2, 0), (True, True, True), 0)  # extent along dim 0 is zero
        assert np.array_equal(to_host(data), before)
    finally:
        grid.destroy()


class ReadOnly:
    """An array seen through a read-only array interface (NumPy's or the CUDA one)."""

    def __init__(self, a: np.ndarray) -> None:
        name = "__array_interface__" if cudecomp.CPU_ONLY else "__cuda_array_interface__"
        iface = dict(getattr(a, name))
        iface["data"] = (iface["data"][0], True)
        self._iface = (name, iface)
        self._keep = a

    def __getattr__(self, name: str) -> object:
        if name == self._iface[0]:
            return self._iface[1]
        raise AttributeError(name)


def readonly(a: np.ndarray) -> object:
    """A read-only view of ``a`` in the variant's array protocol."""
    if cudecomp.CPU_ONLY:
        v = a.view()
        v.flags.writeable = False
        return v
    return ReadOnly(a)


def halo_errors() -> list[tuple[str, dict, type[Exception]]]:
    return [
        ("dim out of range", {"dim": 3}, cudecomp.InvalidUsageError),
        ("dim negative", {"dim": -1}, cudecomp.InvalidUsageError),
        ("dim float", {"dim": 1.0}, TypeError),
        ("halo None", {"halo_extents": None}, cudecomp.InvalidUsageError),
        ("halo negative", {"halo_extents": (1, -2, 1)}, cudecomp.InvalidUsageError),
        ("halo too long", {"halo_extents": (1, 2, 1, 0)}, cudecomp.InvalidUsageError),
        ("halo wider than a neighbour", {"halo_extents": (1, 40, 1)}, cudecomp.InvalidUsageError),
        ("periods strings", {"halo_periods": ("a", "b", "c")}, TypeError),
        ("periods wrong length", {"halo_periods": (True,)}, cudecomp.InvalidUsageError),
        ("wrong shape", {"shape_delta": 1}, cudecomp.InvalidUsageError),
        ("read-only", {"readonly": True}, cudecomp.InvalidUsageError),
        ("numpy dtype", {"dtype": np.float64}, TypeError),
        ("dtype mismatch", {"dtype": DataType.FLOAT}, cudecomp.InvalidUsageError),
        ("small work", {"work": xp.zeros(4, np.uint8)}, cudecomp.InvalidUsageError),
        ("list input", {"as_list": True}, TypeError),
    ]


@pytest.mark.parametrize("name, change, exc", halo_errors(), ids=[e[0] for e in halo_errors()])
def test_halo_errors(handle: cudecomp.Handle, name: str, change: dict, exc: type[Exception]) -> None:
    pdims = (NRANKS, 1)  # Y split over all ranks
    grid = handle.create_grid(config(pdims, HaloCommBackend.MPI))
    try:
        halo = change.get("halo_extents", HALO)
        info = grid.get_pencil_info(0, HALO)
        data = device(make(info, GDIMS, DataType.DOUBLE))
        if change.get("shape_delta"):
            data = xp.zeros((data.shape[0] + 1,) + data.shape[1:])
        arg: object = data.tolist() if change.get("as_list") else data
        if change.get("readonly"):
            arg = readonly(data)
        kwargs = {k: v for k, v in change.items() if k in ("dtype", "work")}
        periods = change.get("halo_periods", (True, True, True))
        dim = change.get("dim", 1)
        if name == "halo wider than a neighbour" and NRANKS == 1:
            dim = 0  # single rank: only the pencil's own extent limits the wrap
            halo = (40, 2, 1)
        with pytest.raises(exc):
            grid.update_halos_x(arg, halo, periods, dim, **kwargs)
        # The grid keeps working.
        ok = device(make(info, GDIMS, DataType.DOUBLE))
        for d in range(3):
            grid.update_halos_x(ok, HALO, (True, True, True), d)
        assert np.array_equal(to_host(ok), expected(info, GDIMS, (True, True, True), DataType.DOUBLE))
    finally:
        grid.destroy()


@pytest.mark.skipif(NRANKS < 2, reason="needs several ranks")
def test_empty_pencil_halo_not_supported(handle: cudecomp.Handle) -> None:
    cfg = config((NRANKS, 1), HaloCommBackend.MPI)
    cfg.gdims = (4, NRANKS - 1 if NRANKS > 2 else 1, 4)
    grid = handle.create_grid(cfg)
    try:
        info = grid.get_pencil_info(0, (1, 1, 1))
        with pytest.raises(cudecomp.NotSupportedError):
            grid.update_halos_x(xp.zeros(info.array_shape), (1, 1, 1), None, 1)
    finally:
        grid.destroy()
