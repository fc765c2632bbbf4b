"""Halo updates: fill the halo cells of an X-pencil from the neighbouring ranks.

Run on 4 ranks:  mpiexec -n 4 python halos.py
"""

import numpy as np
from mpi4py import MPI

import cudecomp

gdims = (32, 24, 16)
halo = (1, 2, 1)  # halo cells on each side of X, Y and Z
periodic = (True, True, False)  # Z has walls: its outer halos are left alone

with cudecomp.Handle(MPI.COMM_WORLD) as handle:
    config = cudecomp.GridDescConfig()
    config.gdims = gdims
    config.pdims = (2, 2)
    config.halo_comm_backend = cudecomp.HaloCommBackend.MPI
    with handle.create_grid(config) as grid:
        info = grid.get_pencil_info(0, halo_extents=halo)
        a = np.full(info.array_shape, -1.0)  # -1 marks cells nobody wrote

        # Global coordinates of every array cell, halos included (memory order is X, Y, Z
        # here, so the array axes are Z, Y, X). Halo cells lie outside [lo, hi].
        z, y, x = np.meshgrid(*(np.arange(info.lo[p] - halo[p], info.hi[p] + halo[p] + 1) for p in (2, 1, 0)), indexing="ij")
        interior = (slice(halo[2], -halo[2]), slice(halo[1], -halo[1]), slice(halo[0], -halo[0]))
        a[interior] = (x + gdims[0] * (y + gdims[1] * z))[interior]

        # One call per global dimension; doing all three also fills edges and corners.
        for dim in range(3):
            grid.update_halos_x(a, halo, periodic, dim)

        # Every cell now holds its global index, wrapped around along periodic axes;
        # halos beyond the walls of Z keep their -1.
        xw, yw = x % gdims[0], y % gdims[1]
        inside = (z >= 0) & (z < gdims[2])
        expected = np.where(inside, xw + gdims[0] * (yw + gdims[1] * z), -1.0)
        assert np.array_equal(a, expected)
        if handle.rank == 0:
            print(f"halo update exact on {handle.nranks} ranks (array shape {a.shape}, halos included)")
