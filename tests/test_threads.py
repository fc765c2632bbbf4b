"""Threads: operations on distinct grids of one handle run concurrently from several
threads without waiting for each other (each grid has its own communicator, and
concurrent operations get their own workspace); those of one grid take turns."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import handle_with, requires_cpu_variant
from cudecomp import DataType, HaloCommBackend, TransposeCommBackend
from oracle import factor_pairs, make

pytestmark = [pytest.mark.mpi, requires_cpu_variant()]

GDIMS = (12, 10, 9)
PDIMS = factor_pairs(MPI.COMM_WORLD.size)[-1]


def grid_for(handle: cudecomp.Handle, t: TransposeCommBackend, h: HaloCommBackend) -> cudecomp.GridDesc:
    c = cudecomp.GridDescConfig()
    c.gdims, c.pdims = GDIMS, PDIMS
    c.transpose_comm_backend, c.halo_comm_backend = t, h
    return handle.create_grid(c)


def run_threads(targets: list[Callable[[], None]], what: str) -> None:
    """Run each target on a thread of its own and wait for all (failing if any hangs)."""
    threads = [threading.Thread(target=t, daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), f"{what} deadlocked"


def work(g: cudecomp.GridDesc, rounds: int, errors: list[BaseException]) -> None:
    try:
        ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
        x, want = make(ia, GDIMS, DataType.DOUBLE), make(ib, GDIMS, DataType.DOUBLE)
        halo = g.get_pencil_info(0, (1, 1, 1))
        h = np.zeros(halo.array_shape)
        for _ in range(rounds):
            y = g.transpose_x_to_y(x)
            assert np.array_equal(y, want)
            back = g.transpose_y_to_x(y)
            assert np.array_equal(back, x)
            for dim in range(3):
                g.update_halos_x(h, (1, 1, 1), (True, True, True), dim)
    except BaseException as e:  # reported by the main thread
        errors.append(e)


@pytest.mark.skipif(MPI.Query_thread() < MPI.THREAD_MULTIPLE, reason="MPI without MPI_THREAD_MULTIPLE")
@pytest.mark.parametrize(
    "pairs",
    [
        [(TransposeCommBackend.DIRECT, HaloCommBackend.DIRECT)] * 2,
        [(TransposeCommBackend.MPI_P2P, HaloCommBackend.MPI), (TransposeCommBackend.DIRECT, HaloCommBackend.DIRECT)],
        [(TransposeCommBackend.MPI_A2A, HaloCommBackend.MPI_BLOCKING), (TransposeCommBackend.MPI_P2P_PL, HaloCommBackend.MPI)],
    ],
    ids=["direct-direct", "mpi-direct", "mpi-mpi"],
)
def test_threads_on_distinct_grids(pairs: list[tuple[TransposeCommBackend, HaloCommBackend]]) -> None:
    # The default mode: the checking mode settles a handle's operations as one sequence,
    # which threads running in different orders on different ranks do not make.
    with handle_with(CUDECOMP_CHECK_COLLECTIVES="0") as handle:
        grids = [grid_for(handle, t, h) for t, h in pairs]
        errors: list[BaseException] = []
        # Opposite start orders on alternate ranks: with a handle-wide lock this deadlocked.
        order = grids if MPI.COMM_WORLD.rank % 2 == 0 else grids[::-1]
        run_threads([lambda g=g: work(g, 20, errors) for g in order], "threads on distinct grids")
        assert not errors, errors
        for g in grids:
            g.destroy()


@pytest.mark.skipif(MPI.Query_thread() < MPI.THREAD_MULTIPLE, reason="MPI without MPI_THREAD_MULTIPLE")
@pytest.mark.parametrize("backend", [TransposeCommBackend.DIRECT, TransposeCommBackend.MPI_P2P, TransposeCommBackend.MPI_A2A])
def test_threads_on_one_grid_take_turns(handle: cudecomp.Handle, backend: TransposeCommBackend) -> None:
    # Two threads calling the same transpose of one grid: the calls take turns, so any
    # interleaving pairs like operations across ranks (without the turns, their messages
    # mixed on the grid's communicators and MPI aborted the job).
    g = grid_for(handle, backend, HaloCommBackend.MPI)
    ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
    x, want = make(ia, GDIMS, DataType.DOUBLE), make(ib, GDIMS, DataType.DOUBLE)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            for _ in range(30):
                assert np.array_equal(g.transpose_x_to_y(x), want)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    run_threads([run, run], "threads on one grid")
    assert not errors, errors
    g.destroy()
