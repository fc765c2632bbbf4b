"""Local to global: gather the Y-pencils of every rank into one global array on rank 0.

The X-pencils are filled from a formula of the global coordinates, then transposed to
Y-pencils with halos; one redistribution then gathers their owned cells on rank 0 (and
another scatters them back), with no hand-written stitching.

Run on 4 ranks:  mpiexec -n 4 python gather.py
"""

import numpy as np
from mpi4py import MPI

import cudecomp

comm = MPI.COMM_WORLD
gdims = (12, 10, 8)  # X, Y, Z; a global array has the C shape (Z, Y, X)

with cudecomp.Handle(comm) as handle:
    config = cudecomp.GridDescConfig()
    config.gdims = gdims
    config.pdims = (2, 2)
    config.transpose_axis_contiguous = (True, True, True)  # Y-pencils stored as a[x, z, y]
    with handle.create_grid(config) as grid:
        # Global to local: each X-pencil cell gets its global index x + X * (y + Y * z).
        x_info = grid.get_pencil_info(0)
        x = grid.empty_pencil(0, np.float64)  # NumPy here; CuPy in the GPU variant
        z_, y_, x_ = np.ogrid[x_info.global_slices]  # the owned part of the global index ranges
        owned = (x_ + gdims[0] * (y_ + gdims[1] * z_)).astype(np.float64)
        # to_global_axes turns local axes into global (Z, Y, X) order; its inverse goes back.
        x[x_info.interior_slices] = owned.transpose(np.argsort(x_info.to_global_axes))

        halo = (1, 1, 1)
        y = grid.zeros_pencil(1, np.float64, halo_extents=halo)
        grid.transpose_x_to_y(x, y, output_halo_extents=halo)

        # Rank 0 holds the whole grid, every other rank nothing: gather and scatter are
        # redistributions between the Y-pencils (halos included) and that layout.
        on_root = cudecomp.BoxLayout.whole(gdims) if handle.rank == 0 else cudecomp.BoxLayout.empty()
        y_layout = grid.pencil(1, halo_extents=halo)
        with handle.create_redistribution(y_layout, on_root) as gather:
            g = gather.run(y)  # rank 0: shape (Z, Y, X); elsewhere (0, 0, 0)
        if handle.rank == 0:
            assert np.array_equal(g.ravel(), np.arange(g.size))  # every cell where it belongs
            print(f"gathered every rank's Y-pencil into a global array of shape {g.shape}")

        with handle.create_redistribution(on_root, y_layout) as scatter:
            back = scatter.run(g, grid.zeros_pencil(1, np.float64, halo_extents=halo))
        interior = grid.get_pencil_info(1, halo_extents=halo).interior_slices
        assert np.array_equal(back[interior], y[interior])  # halos are left to halo updates
