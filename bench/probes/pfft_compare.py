"""Distributed 3-D FFT on CPUs: cudecomp.fft against mpi4py-fft's PFFT, same run.

Both transform the same global N^3 complex128 array on the same ranks with the same local
FFT library (``--library``: ``scipy`` or ``numpy``), unnormalised forward, spectral output
left in each library's transposed distribution. mpi4py-fft is timed with both of its
decompositions (slab and pencil); cudecomp.fft chooses its process grid and transpose
backend by autotuning. Median over the calls of the slowest rank's time per call
(``--reps`` calls after ``--warmup``), the methods alternating ``--rounds`` times.

Usage: mpirun -np 16 python bench/probes/pfft_compare.py [--n 256] [--library scipy] [--rounds 5]
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
    ap.add_argument("--rounds", type=int, default=1, help="alternate the methods this many times (default: 1)")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    shape = (args.n,) * 3
    rng = np.random.default_rng(comm.rank)

    def samples(fn: Callable[[], object]) -> list[float]:
        """Slowest rank's time (ms) of each of ``--reps`` calls after ``--warmup``."""
        for _ in range(args.warmup):
            fn()
        ts = []
        for _ in range(args.reps):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            ts.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX) * 1e3)
        return ts

    names: list[str] = []
    methods: list[Callable[[], object]] = []
    plans = []
    for slab in (True, False):
        with warnings.catch_warnings():  # mpi4py-fft plans on uninitialised arrays (NumPy warns of NaNs)
            warnings.simplefilter("ignore", RuntimeWarning)
            pfft = PFFT(comm, shape, axes=(0, 1, 2), dtype=np.complex128, slab=slab, backend=args.library)
        u = newDistArray(pfft, False)
        u[...] = rng.standard_normal(u.shape) + 1j * rng.standard_normal(u.shape)
        uh = newDistArray(pfft, True)
        plans.append(pfft)
        names.append(f"mpi4py-fft PFFT ({'slab' if slab else 'pencil'})")
        methods.append(lambda p=pfft, a=u, b=uh: p.forward(a, b, normalize=False))
    backends = [cudecomp.TransposeCommBackend[b] for b in ("DIRECT", "MPI_A2A", "MPI_P2P")]
    with cudecomp.Handle(comm) as h:
        kw = {"kind": "c2c", "dtype": np.complex128, "transposed_out": True, "fft_library": args.library}
        with FFT(h, shape, backend=backends, comm=comm, **kw) as plan:
            a = plan.empty_input()
            a[...] = rng.standard_normal(a.shape) + 1j * rng.standard_normal(a.shape)
            out = plan.empty_output()
            backend = cudecomp.TransposeCommBackend(int(plan.grid.config.transpose_comm_backend)).name
            names.append(f"cudecomp.fft ({plan.schedule}, pdims {plan.pdims[0]}x{plan.pdims[1]}, {backend}, autotuned)")
            methods.append(lambda: plan.forward(a, out))
            # Round after round, each method in turn: this host drifts between runs minutes apart.
            per: list[list[float]] = [[] for _ in methods]
            for _ in range(args.rounds):
                for m, acc in zip(methods, per, strict=True):
                    acc += samples(m)
    for p in plans:
        p.destroy()
    rows = [(name, float(np.median(v))) for name, v in zip(names, per, strict=True)]
    if comm.rank == 0:
        print(f"{comm.size} ranks, {args.n}^3 complex128 forward, local FFTs: {args.library}, {args.rounds} rounds x {args.reps}")
        best = min(ms for name, ms in rows if name.startswith("mpi4py"))
        for name, ms in rows:
            print(f"  {name:<64}{ms:9.2f} ms  ({best / ms:.2f}x the speed of mpi4py-fft's best)")


if __name__ == "__main__":
    main()
