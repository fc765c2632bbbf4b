"""Distributed FFTs: a spectral derivative of a real field on any number of ranks.

Run on 4 ranks:  mpiexec -n 4 python fft.py
"""

import numpy as np
from mpi4py import MPI

import cudecomp
from cudecomp.fft import FFT

# --8<-- [start:core]
with cudecomp.Handle(MPI.COMM_WORLD) as handle:
    # r2c plan of a 64 x 48 x 32 real grid; pdims=None would time every process grid.
    with FFT(handle, (64, 48, 32), pdims=(2, 2), kind="r2c", transposed_out=True) as plan:
        x, y, z = plan.coordinates()  # this rank's grid points on [0, 2 pi)^3
        u = np.sin(2 * x) * np.cos(y) * np.cos(3 * z)  # shape plan.input_info.array_shape

        u_hat = plan.forward(u)  # complex128, shape plan.output_info.array_shape
        kx, ky, kz = plan.wavenumbers()  # broadcastable against u_hat
        du_dz = plan.backward(1j * kz * u_hat)  # back in this rank's X-pencil

        exact = -3 * np.sin(2 * x) * np.cos(y) * np.sin(3 * z)
        error = MPI.COMM_WORLD.allreduce(float(np.abs(du_dz - exact).max()), op=MPI.MAX)
        # --8<-- [end:core]
        if handle.rank == 0:
            print(plan)
            print(f"spectral pencil {plan.output_info.array_shape} on rank 0; max error of du/dz: {error:.2e}")
        assert error < 1e-12
