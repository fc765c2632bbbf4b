"""Distributed 3-D FFT on CPUs: cudecomp.fft against mpi4py-fft's PFFT, same run.

Both transform the same global N^3 complex128 array on the same ranks with the same local
FFT library (``--library``: ``scipy`` or ``numpy``), unnormalised forward, spectral output
left in each library's transposed distribution. mpi4py-fft is timed with both of its
decompositions (slab and pencil); cudecomp.fft chooses its process grid and transpose
backend by autotuning. Slowest rank's median of ``--reps`` calls after ``--warmup``.

Usage: mpirun -np 16 python bench/probes/pfft_compare.py [--n 256] [--library scipy]
Needs mpi4py-fft (PyPI ``mpi4py-fft``, built against FFTW).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable

import numpy as np
from mpi4py import MPI
from mpi4py_fft import PFFT, newDistArray

import cudecomp
from cudecomp.fft import FFT


def main() -> None:
    """Print the median forward time of each method (rank 0)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="grid points per axis (default: 256)")
    ap.add_argument("--library", default="scipy", choices=["scipy", "numpy"], help="local FFT library of both (default: scipy)")
    ap.add_argument("--reps", type=int, default=10, help="timed calls (default: 10)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls first (default: 3)")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    shape = (args.n,) * 3
    rng = np.random.default_rng(comm.rank)

    def timed(fn: Callable[[], object]) -> float:
        for _ in range(args.warmup):
            fn()
        ts = []
        for _ in range(args.reps):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return float(comm.allreduce(float(np.median(ts)), op=MPI.MAX)) * 1e3

    rows: list[tuple[str, float]] = []
    for slab in (True, False):
        with warnings.catch_warnings():  # mpi4py-fft plans on uninitialised arrays (NumPy warns of NaNs)
            warnings.simplefilter("ignore", RuntimeWarning)
            pfft = PFFT(comm, shape, axes=(0, 1, 2), dtype=np.complex128, slab=slab, backend=args.library)
        u = newDistArray(pfft, False)
        u[...] = rng.standard_normal(u.shape) + 1j * rng.standard_normal(u.shape)
        uh = newDistArray(pfft, True)
        ms = timed(lambda p=pfft, a=u, b=uh: p.forward(a, b, normalize=False))
        rows.append((f"mpi4py-fft PFFT ({'slab' if slab else 'pencil'})", ms))
        pfft.destroy()
    backends = [cudecomp.TransposeCommBackend[b] for b in ("DIRECT", "MPI_A2A", "MPI_P2P")]
    with cudecomp.Handle(comm) as h:
        kw = {"kind": "c2c", "dtype": np.complex128, "transposed_out": True, "fft_library": args.library}
        with FFT(h, shape, backend=backends, comm=comm, **kw) as plan:
            a = plan.empty_input()
            a[...] = rng.standard_normal(a.shape) + 1j * rng.standard_normal(a.shape)
            out = plan.empty_output()
            ms = timed(lambda: plan.forward(a, out))
            backend = cudecomp.TransposeCommBackend(int(plan.grid.config.transpose_comm_backend)).name
            rows.append((f"cudecomp.fft ({plan.schedule}, pdims {plan.pdims[0]}x{plan.pdims[1]}, {backend}, autotuned)", ms))
    if comm.rank == 0:
        print(f"{comm.size} ranks, {args.n}^3 complex128 forward, local FFTs: {args.library}")
        best = min(ms for name, ms in rows if name.startswith("mpi4py"))
        for name, ms in rows:
            print(f"  {name:<64}{ms:9.2f} ms  ({best / ms:.2f}x the speed of mpi4py-fft's best)")


if __name__ == "__main__":
    main()
