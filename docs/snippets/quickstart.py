"""Quick start: the four transposes of a 64 x 48 x 32 grid on a 2 x 2 process grid.

Run on 4 ranks:  mpiexec -n 4 python quickstart.py
"""

import numpy as np
from mpi4py import MPI

import cudecomp


# --8<-- [start:helper]
def global_index(info: cudecomp.PencilInfo, gdims: tuple[int, int, int]) -> np.ndarray:
    """Return the global linear index x + X * (y + Y * z) of every cell of a pencil (no halos)."""
    # Array axis k is memory position 2 - k, which holds global axis info.order[2 - k].
    cells = np.meshgrid(*(np.arange(info.lo[p], info.hi[p] + 1) for p in (2, 1, 0)), indexing="ij")
    x, y, z = (cells[2 - info.order.index(axis)] for axis in range(3))
    return x + gdims[0] * (y + gdims[1] * z)
    # --8<-- [end:helper]


comm = MPI.COMM_WORLD
gdims = (64, 48, 32)

# --8<-- [start:core]
with cudecomp.Handle(comm) as handle:
    config = cudecomp.GridDescConfig()
    config.gdims = gdims
    config.pdims = (2, 2)  # P_rows x P_cols must equal the number of ranks
    config.transpose_comm_backend = cudecomp.TransposeCommBackend.MPI_A2A

    with handle.create_grid(config) as grid:
        x_info = grid.get_pencil_info(0)  # this rank's X-pencil
        x = global_index(x_info, gdims).astype(np.float64)  # shape == x_info.array_shape

        y = grid.transpose_x_to_y(x)  # allocates the Y-pencil
        z = grid.transpose_y_to_z(y)  # allocates the Z-pencil
        assert np.array_equal(z, global_index(grid.get_pencil_info(2), gdims))

        back = np.empty_like(x)
        grid.transpose_y_to_x(grid.transpose_z_to_y(z), out=back)  # or fill an array you own
        assert np.array_equal(back, x)
        # --8<-- [end:core]

        if handle.rank == 0:
            print("X-pencil:", x_info)
            print("array shapes: X", x.shape, "Y", y.shape, "Z", z.shape)
            print(f"all four transposes exact on {handle.nranks} ranks")
