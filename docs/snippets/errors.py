"""Errors are exceptions; the handle and the grid keep working after one.

Run on 4 ranks:  mpiexec -n 4 python errors.py
"""

import numpy as np
from mpi4py import MPI

import cudecomp

with cudecomp.Handle(MPI.COMM_WORLD) as handle:
    config = cudecomp.GridDescConfig()
    config.gdims = (16, 16, 16)
    config.pdims = (4, 4)  # 16 ranks wanted, 4 present
    try:
        handle.create_grid(config)
    except cudecomp.InvalidUsageError as e:  # also a ValueError
        assert e.result == cudecomp.Result.INVALID_USAGE
        if handle.rank == 0:
            print("InvalidUsageError:", e)

    try:
        config.transpose_comm_backend = "MPI_A2A"  # type: ignore[assignment]  # not an enum member
    except TypeError as e:
        if handle.rank == 0:
            print("TypeError:", e)

    config.pdims = (2, 2)
    with handle.create_grid(config) as grid:
        info = grid.get_pencil_info(0)
        wrong = np.zeros(info.shape)  # memory-order shape instead of array_shape
        try:
            grid.transpose_x_to_y(wrong)
        except cudecomp.CudecompError as e:  # the base class of every cudecomp error
            if handle.rank == 0:
                print(f"{type(e).__name__} ({e.result.name}):", e)

        y = grid.transpose_x_to_y(np.zeros(info.array_shape))  # the grid still works
        assert y.shape == grid.get_pencil_info(1).array_shape
