"""Probe: seconds per Poisson solve (periodic x Neumann x Dirichlet, cell-centred, fd2) of an n^3 float64 field."""

import sys
import time

import numpy as np
from mpi4py import MPI

import cudecomp
import cudecomp.fft

comm = MPI.COMM_WORLD
n = int(sys.argv[1])
pdims = tuple(int(v) for v in sys.argv[2].split("x"))
gpu = not cudecomp.CPU_ONLY
if gpu:
    import cupy
with cudecomp.Handle(comm) as h:
    with cudecomp.fft.Poisson(
        h,
        (n, n, n),
        pdims,
        bc=("periodic", "neumann", "dirichlet"),
        operator="fd2",
        backend=cudecomp.TransposeCommBackend.DIRECT if comm.size > 1 else None,
    ) as s:
        f = s.plan.zeros_input()
        f += 1.0
        u = s.plan.empty_input()
        ts = []
        for _ in range(8):
            comm.Barrier()
            t0 = time.perf_counter()
            s.solve(f, u)
            if gpu:
                cupy.cuda.get_current_stream().synchronize()
            comm.Barrier()
            ts.append(time.perf_counter() - t0)
        if comm.rank == 0:
            print(
                f"poisson {n}^3 f64 {'GPU' if gpu else 'CPU'} {comm.size} ranks pdims {pdims}: {1e3 * np.median(ts[2:]):.2f} ms per solve",
                flush=True,
            )
