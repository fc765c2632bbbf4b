"""Threads: two grids of one host handle, each driven by its own thread (CPU variant).

Run on 4 ranks:  mpiexec -n 4 python threads.py

The checking mode (CUDECOMP_CHECK_COLLECTIVES=1) settles all of a handle's operations as
one sequence, which two threads' operations do not make in the same order on every rank:
there, give each thread a handle of its own.
"""

import threading

import numpy as np
from mpi4py import MPI

import cudecomp

assert MPI.Query_thread() == MPI.THREAD_MULTIPLE  # what mpi4py asks for by default


def round_trips(grid: cudecomp.GridDesc, results: list[bool]) -> None:
    """Run X->Y->X transposes on one grid; only this thread uses it."""
    x = np.random.default_rng(grid.handle.rank).standard_normal(grid.get_pencil_info(0).array_shape)
    for _ in range(10):
        back = grid.transpose_y_to_x(grid.transpose_x_to_y(x))
        results.append(bool(np.array_equal(back, x)))


with cudecomp.Handle(MPI.COMM_WORLD) as handle:
    config = cudecomp.GridDescConfig()
    config.gdims, config.pdims = (32, 24, 16), (2, 2)
    # Grids are created (and destroyed) by the main thread: these calls are collective on
    # the handle's communicator and never run concurrently.
    with handle.create_grid(config) as a, handle.create_grid(config) as b:
        results: list[bool] = []
        threads = [threading.Thread(target=round_trips, args=(g, results)) for g in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 20 and all(results)
        if handle.rank == 0:
            print(f"20 round trips on two grids from two threads, exact on {handle.nranks} ranks")
