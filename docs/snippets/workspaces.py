"""In-place transposes, halos and padding on transposes, and explicit workspaces.

Run on 4 ranks:  mpiexec -n 4 python workspaces.py
"""

import numpy as np
from mpi4py import MPI

import cudecomp

rng = np.random.default_rng(MPI.COMM_WORLD.rank)

with cudecomp.Handle(MPI.COMM_WORLD) as handle:
    config = cudecomp.GridDescConfig()
    config.gdims = (32, 24, 16)
    config.pdims = (2, 2)
    with handle.create_grid(config) as grid:
        x_info, y_info = grid.get_pencil_info(0), grid.get_pencil_info(1)

        # In place: two views of one buffer large enough for the larger pencil.
        buf = np.empty(max(x_info.size, y_info.size), np.complex128)
        x = buf[: x_info.size].reshape(x_info.array_shape)
        y = buf[: y_info.size].reshape(y_info.array_shape)
        x[...] = rng.standard_normal(x.shape)
        original = x.copy()
        grid.transpose_x_to_y(x, y)  # y now holds the Y-pencil; x's view is overwritten

        # An explicit workspace (here from Handle.malloc) instead of the automatic one.
        dtype = cudecomp.DataType.DOUBLE_COMPLEX
        nbytes = grid.get_transpose_workspace_size() * cudecomp.get_data_type_size(dtype)
        work = handle.malloc(grid, nbytes)
        grid.transpose_y_to_x(y, x, work=work, dtype=dtype)  # in place again, back to X
        handle.free(grid, work)
        assert np.array_equal(x, original)

        # Halos and padding on either side: the input's layout says where its interior
        # is; only the output's interior is written.
        h_info = grid.get_pencil_info(0, halo_extents=(1, 1, 1))
        xh = np.zeros(h_info.array_shape, np.complex128)
        xh[1:-1, 1:-1, 1:-1] = original  # array axes are Z, Y, X
        y2 = grid.transpose_x_to_y(xh, input_halo_extents=(1, 1, 1))

        p_info = grid.get_pencil_info(0, padding=(2, 0, 0))  # two extra cells after X
        xp = np.full(p_info.array_shape, np.nan, np.complex128)
        grid.transpose_y_to_x(y2, xp, output_padding=(2, 0, 0))
        assert np.array_equal(xp[:, :, :-2], original)  # the interior
        assert np.isnan(xp[:, :, -2:]).all()  # the padding is untouched
        if handle.rank == 0:
            print("in-place, explicit-workspace, halo and padding transposes exact")
