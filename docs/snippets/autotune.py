"""Autotuning: let cudecomp pick the process grid and the backends.

Run on 4 ranks:  mpiexec -n 4 python autotune.py
"""

from mpi4py import MPI

import cudecomp

with cudecomp.Handle(MPI.COMM_WORLD) as handle:
    config = cudecomp.GridDescConfig()
    config.gdims = (64, 64, 64)
    config.pdims = (0, 0)  # search the process grid

    options = cudecomp.GridDescAutotuneOptions()
    options.dtype = cudecomp.DataType.DOUBLE_COMPLEX
    options.autotune_transpose_backend = True  # search the transpose backend too
    options.transpose_op_weights = (1.0, 1.0, 1.0, 1.0)  # X->Y, Y->Z, Z->Y, Y->X
    options.autotune_halo_backend = True  # then the halo backend, on the chosen grid
    options.halo_extents = (1, 1, 1)
    options.halo_periods = (True, True, True)
    options.n_warmup_trials = 2
    options.n_trials = 3

    with handle.create_grid(config, options) as grid:
        # create_grid wrote its choices back into config (grid.config holds a copy).
        result = grid.autotune_result  # what was measured, on every rank (None without a search)
        assert result.pdims == tuple(config.pdims)
        if handle.rank == 0:
            print("chosen:", config.pdims, config.transpose_comm_backend, config.halo_comm_backend)
            print(result.table())
