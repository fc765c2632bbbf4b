"""The checking mode across objects: ranks at collective calls of different objects of one
handle (a grid destroyed on one rank while another runs a redistribution of it, a
transpose of one grid against a halo update of another, I/O against an FFT) raise
``InvalidUsageError`` on every rank naming both calls, instead of waiting for each other
forever; every object is still alive and works afterwards."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_data_path
from cudecomp import DataType
from cudecomp.fft import FFT
from oracle import device, factor_pairs, make, to_host

pytestmark = [pytest.mark.mpi(min_ranks=2), pytest.mark.checking, requires_data_path()]

COMM = MPI.COMM_WORLD
RANK = COMM.rank
GDIMS = (8, 6, 4)


def config(gdims: tuple[int, int, int] = GDIMS) -> cudecomp.GridDescConfig:
    c = cudecomp.GridDescConfig()
    c.gdims, c.pdims = gdims, factor_pairs(COMM.size)[-1]
    return c


def both_calls_named(first: Callable[[], Any], other: Callable[[], Any], first_words: str, other_words: str) -> None:
    """Rank 0 makes ``first``, the others ``other``: every rank raises naming both."""
    with pytest.raises(cudecomp.InvalidUsageError) as e:
        (first if RANK == 0 else other)()
    m = str(e.value)
    assert "ranks disagree on the collective call" in m, m
    assert re.search(first_words, m) and re.search(other_words, m), m


def test_a_grid_destroyed_while_a_redistribution_of_it_runs(handle: cudecomp.Handle) -> None:
    with handle.create_grid(config()) as g:
        if not g._checks_collectives:
            pytest.skip("runs in the checking mode (CUDECOMP_CHECK_COLLECTIVES=1, the suites' default)")
        info = g.get_pencil_info(0)
        x = device(make(info, GDIMS, DataType.DOUBLE))
        with handle.create_redistribution(g.pencil(0), g.pencil(2)) as r:
            both_calls_named(g.destroy, lambda: r.run(x), r"grid \d+: destroy\(\)", r"redistribution \d+: run")
            # Both objects live on every rank: the same calls now work.
            z = r.run(x)
            assert np.array_equal(to_host(z), make(r.output_info, GDIMS, DataType.DOUBLE))
        y = g.transpose_x_to_y(x)
        assert np.array_equal(to_host(y), make(g.get_pencil_info(1), GDIMS, DataType.DOUBLE))


def test_a_transpose_of_one_grid_against_a_halo_update_of_another(handle: cudecomp.Handle) -> None:
    with handle.create_grid(config()) as a, handle.create_grid(config()) as b:
        x = device(make(a.get_pencil_info(0), GDIMS, DataType.DOUBLE))
        h = device(make(b.get_pencil_info(0, (1, 1, 1)), GDIMS, DataType.DOUBLE))
        both_calls_named(
            lambda: a.transpose_x_to_y(x),
            lambda: b.update_halos_x(h, (1, 1, 1), (True, True, True), 0),
            r"grid \d+: transpose_x_to_y",
            r"grid \d+: update_halos_x",
        )
        assert np.array_equal(to_host(a.transpose_x_to_y(x)), make(a.get_pencil_info(1), GDIMS, DataType.DOUBLE))
        b.update_halos_x(h, (1, 1, 1), (True, True, True), 0)


def test_a_write_against_an_fft_and_a_plan_destroyed_against_a_grid(handle: cudecomp.Handle, tmp_path: Any) -> None:
    import cudecomp.io as cio

    path = COMM.bcast(os.path.join(str(tmp_path), "u.h5") if RANK == 0 else None)
    gdims = (8, 8, 8)
    with FFT(handle, gdims, factor_pairs(COMM.size)[-1], kind="c2c") as plan, handle.create_grid(config(gdims)) as g:
        info = g.get_pencil_info(0)
        u = device(make(info, gdims, DataType.DOUBLE))
        a = plan.empty_input()
        a[...] = 1.0
        both_calls_named(
            lambda: cio.write(path, {"u": u}, g.pencil(0)), lambda: plan.forward(a), r"cudecomp\.io\.write", r"cudecomp\.fft\.FFT"
        )
        both_calls_named(plan.destroy, g.destroy, r"cudecomp\.fft\.FFT", r"grid \d+: destroy")
        spec = plan.forward(a)
        assert spec.shape == plan.empty_output().shape
        cio.write(path, {"u": u}, g.pencil(0))
        assert np.array_equal(to_host(cio.read(path, "u", g.pencil(0))), make(info, gdims, DataType.DOUBLE))
