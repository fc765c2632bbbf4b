"""Write a field into one HDF5 file on 4 ranks, read it back on another decomposition.

The file holds the global array; h5py (or xarray, ParaView) opens it without cudecomp.

Run on 4 ranks:  mpiexec -n 4 python io.py
"""

import os
import tempfile

import numpy as np
from mpi4py import MPI

import cudecomp
import cudecomp.io

comm = MPI.COMM_WORLD
gdims = (16, 12, 8)
path = comm.bcast(os.path.join(tempfile.mkdtemp(), "field.h5") if comm.rank == 0 else None)


def config(pdims: tuple[int, int]) -> cudecomp.GridDescConfig:
    """Return the configuration of a grid of ``gdims`` on the process grid ``pdims``."""
    c = cudecomp.GridDescConfig()
    c.gdims, c.pdims = gdims, pdims
    return c


with cudecomp.Handle(comm) as handle, handle.create_grid(config((2, 2))) as pencils, handle.create_grid(config((1, 4))) as slabs:
    # A Y-pencil with halos: only its owned cells go to the file.
    info = pencils.get_pencil_info(1, halo_extents=(1, 1, 1))
    u = pencils.zeros_pencil(1, np.float64, halo_extents=(1, 1, 1))
    z, y, x = np.ogrid[info.global_slices]
    u[info.interior_slices] = (x + 100 * y + 10000 * z).transpose(np.argsort(info.to_global_axes))

    layout = pencils.pencil(1, halo_extents=(1, 1, 1))
    cudecomp.io.write(path, {"u": u}, layout, attrs={"time": 0.5, "step": 10})

    # Read back as X-pencils of another process grid.
    x_slab = cudecomp.io.read(path, "u", slabs.pencil(0))
    xi = slabs.get_pencil_info(0)
    z, y, x = np.ogrid[xi.global_slices]
    assert np.array_equal(x_slab, (x + 100 * y + 10000 * z).transpose(np.argsort(xi.to_global_axes)).astype(np.float64))

    if handle.rank == 0:
        import h5py

        with h5py.File(path, "r") as f:  # an ordinary HDF5 file
            print(f"{path}: u {f['u'].shape} {f['u'].dtype}, time {f.attrs['time']}")
