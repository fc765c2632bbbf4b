"""cudecomp.fft.Poisson on manufactured solutions: every boundary on both grids, both operators,
the null space, pencils other than X, in place, and the refusals on every rank."""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_data_path
from cudecomp.fft import Poisson
from oracle import device, factor_pairs, to_host, xp

pytest.importorskip("scipy")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import poisson as example  # noqa: E402

pytestmark = [pytest.mark.mpi, requires_data_path()]

COMM = MPI.COMM_WORLD
PDIMS = factor_pairs(COMM.size)
L = (2.0, 1.0, 1.5)


def global_error(got: Any, want: Any) -> float:
    local = float(abs(to_host(got) - to_host(want)).max()) if got.size else 0.0
    return COMM.allreduce(local, op=MPI.MAX) / COMM.allreduce(float(abs(to_host(want)).max()) if want.size else 0.0, op=MPI.MAX)


def manufactured(solver: Poisson, lam: float) -> tuple[Any, Any]:
    x, y, z = solver.plan.coordinates(L)
    u, lap = example.exact(x, y, z, xp)
    u = xp.ascontiguousarray(xp.broadcast_to(u, solver.plan.input_info.array_shape))
    return u, xp.ascontiguousarray(lap - lam * u)


@pytest.mark.parametrize("pdims", PDIMS, ids=lambda p: f"{p[0]}x{p[1]}")
@pytest.mark.parametrize("lam", [0.0, 2.5])
def test_walls_to_spectral_accuracy_and_second_order(handle: cudecomp.Handle, pdims: tuple[int, int], lam: float) -> None:
    bc = ("periodic", "neumann", "dirichlet")
    with Poisson(handle, (24, 24, 24), pdims, bc=bc, lengths=L, lam=lam) as s:
        u, f = manufactured(s, lam)
        assert global_error(s.solve(f), u) < 1e-12
    errs = []
    for n in (12, 24):
        with Poisson(handle, (n, n, n), pdims, bc=bc, lengths=L, lam=lam, operator="fd2") as s:
            u, f = manufactured(s, lam)
            errs.append(global_error(s.solve(f), u))
    assert 3.6 < errs[0] / errs[1] < 4.4, errs


@pytest.mark.parametrize("grid", ["cell", "vertex"])
@pytest.mark.parametrize("bc", ["neumann", "dirichlet"])
def test_one_mode_on_both_grids(handle: cudecomp.Handle, grid: str, bc: str) -> None:
    """A single eigenfunction of each boundary and grid is solved exactly by both operators."""
    n = 10
    for op in ("spectral", "fd2"):
        with Poisson(handle, (n, n + 1, n + 2), PDIMS[-1], bc=bc, grid=grid, lengths=L, operator=op) as s:
            coords = s.plan.coordinates(L)
            modes = [2, 1, 3]
            u = 1.0
            eig = 0.0
            for g in range(3):
                k = np.pi * modes[g] / L[g]
                u = u * (xp.cos(k * coords[g]) if bc == "neumann" else xp.sin(k * coords[g]))
                n_g = s.plan.gdims[g]
                h = L[g] / ((n_g - 1) if (grid == "vertex" and bc == "neumann") else (n_g + 1) if grid == "vertex" else n_g)
                eig += -(k**2) if op == "spectral" else -(2 - 2 * np.cos(k * h)) / h**2
            u = xp.ascontiguousarray(xp.broadcast_to(u, s.plan.input_info.array_shape))
            got = s.solve(xp.ascontiguousarray(eig * u))
            assert global_error(got, u) < 1e-12, (op, grid, bc)


def test_the_null_space(handle: cudecomp.Handle) -> None:
    gdims = (8, 6, 6)
    with Poisson(handle, gdims, PDIMS[0], bc="periodic") as s:
        x, y, z = s.plan.coordinates()
        u = xp.ascontiguousarray(xp.broadcast_to(xp.sin(x) * xp.cos(2 * y), s.plan.input_info.array_shape))
        f = xp.ascontiguousarray(-5 * u)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert global_error(s.solve(f), u) < 1e-12  # zero mean: no warning
        with pytest.warns(RuntimeWarning, match="non-zero mean") if _holds_mean(s) else warnings.catch_warnings():
            got = s.solve(f + 1.0)
        assert global_error(got, u) < 1e-12  # the zero-mean solution
    with Poisson(handle, gdims, PDIMS[0], bc=("periodic", "neumann", "neumann"), mean="raise") as s:
        f = xp.ones(s.plan.input_info.array_shape)
        expected = "non-zero mean" if _holds_mean(s) else "failed in cudecomp.fft.Poisson.solve: the mean of f"
        with pytest.raises(cudecomp.InvalidUsageError, match=expected):
            s.solve(f)
        assert float(abs(to_host(s.solve(xp.zeros_like(f)))).max()) == 0.0  # the solver works on
    # A Dirichlet axis, or lam > 0, has no null space.
    with Poisson(handle, gdims, PDIMS[0], bc=("periodic", "dirichlet", "periodic"), mean="raise") as s:
        s.solve(xp.ones(s.plan.input_info.array_shape))


def _holds_mean(s: Poisson) -> bool:
    return bool(s._mean_here)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_other_pencils_and_in_place(handle: cudecomp.Handle, axis: int) -> None:
    with Poisson(handle, (12, 10, 8), PDIMS[-1], bc=("dirichlet", "periodic", "neumann"), lengths=L) as s:
        g = s.plan.grid
        x, y, z = s.plan.coordinates(L)
        mode = xp.sin(np.pi * x / L[0]) * xp.cos(2 * np.pi * y / L[1]) * xp.cos(np.pi * z / L[2])
        u = xp.ascontiguousarray(xp.broadcast_to(mode, s.plan.input_info.array_shape))
        eig = -((np.pi / L[0]) ** 2 + (2 * np.pi / L[1]) ** 2 + (np.pi / L[2]) ** 2)
        f = xp.ascontiguousarray(eig * u)
        if axis:
            move = getattr(g, f"transpose_x_to_{'xyz'[axis]}")
            u, f = move(u), move(f)
        kept = to_host(f).copy()
        got = s.solve(f, axis=axis)
        assert global_error(got, u) < 1e-12 and np.array_equal(to_host(f), kept)
        assert s.solve(f, f, axis=axis) is f
        assert global_error(f, u) < 1e-12


def test_refusals_on_every_rank(handle: cudecomp.Handle) -> None:
    last = COMM.rank == COMM.size - 1
    Invalid = cudecomp.InvalidUsageError
    with pytest.raises(Invalid, match=r"bc\[1\] 'wall': expected one of"):
        Poisson(handle, (8, 8, 8), PDIMS[0], bc=("periodic", "wall", "neumann"))
    with pytest.raises(Invalid, match="expected 3 boundary conditions"):
        Poisson(handle, (8, 8, 8), PDIMS[0], bc=("periodic", "neumann"))
    with pytest.raises(Invalid, match="lam: expected a finite number >= 0"):
        Poisson(handle, (8, 8, 8), PDIMS[0], lam=-1.0)
    with pytest.raises(Invalid, match="operator 'fd4'"):
        Poisson(handle, (8, 8, 8), PDIMS[0], operator="fd4")
    if COMM.size > 1:
        with pytest.raises(Invalid, match="bc is"):
            Poisson(handle, (8, 8, 8), PDIMS[0], bc="dirichlet" if last else "neumann")
    with Poisson(handle, (8, 8, 8), PDIMS[0], bc="dirichlet") as s:
        with pytest.raises(Invalid, match="axis"):
            s.solve(xp.zeros(s.plan.input_info.array_shape), axis=3)
        assert s.solve(device(np.zeros(s.plan.input_info.array_shape))).shape == tuple(s.plan.input_info.array_shape)
