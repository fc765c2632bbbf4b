"""Pencil arrays from the library, between which DIRECT transposes copy each cell once.

On DIRECT grids of the CPU variant they live in node-shared memory.

Run on 4 ranks:  mpiexec -n 4 python library_arrays.py
"""

import numpy as np
from mpi4py import MPI

import cudecomp

with cudecomp.Handle(MPI.COMM_WORLD) as handle:
    config = cudecomp.GridDescConfig()
    config.gdims = (128, 128, 128)
    config.pdims = (2, 2)
    config.transpose_comm_backend = cudecomp.TransposeCommBackend.DIRECT
    with handle.create_grid(config) as grid:
        # Allocate once and reuse: arrays of 1 MiB or more are node-shared.
        x = grid.empty_pencil(0, np.complex128)
        y = grid.empty_pencil(1, np.complex128)
        z = grid.empty_pencil(2, np.complex128)
        x[...] = np.random.default_rng(handle.rank).standard_normal(x.shape)
        original = x.copy()  # an ordinary NumPy array
        for _ in range(3):  # a solver's steps
            grid.transpose_x_to_y(x, y)  # every rank writes its chunks into the others' y
            grid.transpose_y_to_z(y, z)
            grid.transpose_z_to_y(z, y)
            grid.transpose_y_to_x(y, x)
        assert np.array_equal(x, original)
        # Ordinary arrays work too (two copies): same result.
        assert np.array_equal(grid.transpose_x_to_y(original), y)
        # own_cells=False moves only the cells that change rank: those this rank keeps
        # (in both its X- and its Y-pencil) are left for the caller to read from x.
        y[...] = 0
        grid.transpose_x_to_y(x, y, own_cells=False)
        moved = y != 0
        full = grid.transpose_x_to_y(x)
        assert np.array_equal(y[moved], full[moved])
        boxes = [{i.order[d]: (i.lo[d], i.hi[d]) for d in range(3)} for i in (grid.get_pencil_info(0), grid.get_pencil_info(1))]
        own = np.prod([max(0, min(boxes[0][a][1], boxes[1][a][1]) - max(boxes[0][a][0], boxes[1][a][0]) + 1) for a in range(3)])
        assert (~moved).sum() == own
