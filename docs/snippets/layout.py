"""Pencil layouts: what get_pencil_info reports for each pencil.

With and without axis-contiguous storage, halos and padding.

Run on 4 ranks:  mpiexec -n 4 python layout.py
"""

from mpi4py import MPI

import cudecomp

with cudecomp.Handle(MPI.COMM_WORLD) as handle:
    for contiguous in (False, True):
        config = cudecomp.GridDescConfig()
        config.gdims = (64, 48, 32)
        config.pdims = (2, 2)
        config.transpose_axis_contiguous = (contiguous,) * 3
        with handle.create_grid(config) as grid:
            for axis in range(3):
                info = grid.get_pencil_info(axis)
                if handle.rank == 1:
                    print(f"contiguous={contiguous} {'XYZ'[axis]}-pencil: {info}, array_shape={info.array_shape}")
            # Halos on both sides of every axis and padding after the end of X, on the X-pencil:
            info = grid.get_pencil_info(0, halo_extents=(1, 1, 1), padding=(2, 0, 0))
            if handle.rank == 1 and not contiguous:
                print(f"X-pencil with halos and padding: {info}, array_shape={info.array_shape}")
