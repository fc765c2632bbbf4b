"""Move a field between decompositions: a slab grid, a pencil grid and bricks.

A solver that runs its FFTs on slabs (1 x 4) and a stencil on pencils (2 x 2), and reads
its initial data as bricks (2 x 2 x 1 boxes), moves the field between them with
redistributions made once and run every step. X to Z is one exchange on any grid.

Run on 4 ranks:  mpiexec -n 4 python redistribute.py
"""

import numpy as np
from mpi4py import MPI

import cudecomp

comm = MPI.COMM_WORLD
gdims = (16, 12, 8)


def config(pdims: tuple[int, int]) -> cudecomp.GridDescConfig:
    """Return the configuration of a grid of ``gdims`` on the process grid ``pdims``."""
    c = cudecomp.GridDescConfig()
    c.gdims, c.pdims = gdims, pdims
    return c


def oracle(info: cudecomp.PencilInfo) -> np.ndarray:
    """Return the cells ``info`` describes of the global array whose value at each point is its index."""
    g = np.arange(np.prod(gdims), dtype=np.float64).reshape(gdims[::-1])
    return np.ascontiguousarray(g[info.global_slices].transpose(np.argsort(info.to_global_axes)))


with cudecomp.Handle(comm) as handle, handle.create_grid(config((1, 4))) as slabs, handle.create_grid(config((2, 2))) as pencils:
    # This rank's brick: X split in two, Y split in two, Z whole (hi is inclusive).
    bx, by = handle.rank % 2, handle.rank // 2
    brick = cudecomp.BoxLayout((8 * bx, 6 * by, 0), (8 * bx + 7, 6 * by + 5, 7))

    to_slabs = handle.create_redistribution(brick, slabs.pencil(0))
    to_pencils = handle.create_redistribution(slabs.pencil(0), pencils.pencil(1, halo_extents=(1, 1, 1)))
    with to_slabs, to_pencils:
        b = oracle(to_slabs.input_info)  # the brick, as read from a file
        x = to_slabs.run(b)  # X-slab of the 1 x 4 grid
        y = to_pencils.run(x)  # Y-pencil of the 2 x 2 grid, with halos
        info = to_pencils.output_info
        assert np.array_equal(y[info.interior_slices], oracle(info))  # halos: left to halo updates

    z = pencils.transpose_x_to_z(oracle(pencils.get_pencil_info(0)))  # one exchange, not two
    assert np.array_equal(z, oracle(pencils.get_pencil_info(2)))
    if handle.rank == 0:
        print("brick -> 1x4 slab -> 2x2 pencil with halos, and X -> Z: every cell where it belongs")
