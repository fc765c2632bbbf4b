"""cudecomp.fft.Poisson: a pressure-like Poisson problem with walls, solved to spectral and to second-order accuracy.

Run under MPI, e.g.::

    mpiexec -n 4 python examples/poisson.py
    mpiexec -n 4 python examples/poisson.py --sizes 16 32 64 128 --pdims 2x2 --lam 1

The box [0, 2] x [0, 1] x [0, 1.5] is periodic in X, has Neumann walls in Y (zero normal
derivative, as a pressure at a no-slip wall) and Dirichlet walls in Z (zero value), on a
cell-centred grid. The manufactured solution

    u = exp(sin(2 pi x / Lx)) * exp(cos(pi y / Ly)) * sin(pi z / Lz) exp(cos(pi z / Lz))

meets these boundaries and its periodic, even and odd extensions are smooth, so the
spectral operator (FFT x DCT-II x DST-II) converges faster than any power of the grid
spacing; the second-order finite-difference operator (the same transforms, the
difference's eigenvalues) converges as h^2. The example solves lap(u) - lam u = f for
f computed from u exactly, prints the largest error per grid for both operators, and
exits with status 1 unless the spectral error falls below 1e-9 on the finest grid and
the finite-difference errors fall by a factor between 3.5 and 4.5 per doubling.

Works with the CPU variant (NumPy arrays) and the GPU variant (CuPy arrays).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
from mpi4py import MPI

import cudecomp
import cudecomp.fft

LENGTHS = (2.0, 1.0, 1.5)


def exact(x: Any, y: Any, z: Any, xp: Any) -> tuple[Any, Any]:
    """Return the manufactured solution and its Laplacian at the given points."""
    kx, ky, kz = 2 * np.pi / LENGTHS[0], np.pi / LENGTHS[1], np.pi / LENGTHS[2]
    a, b = xp.exp(xp.sin(kx * x)), xp.exp(xp.cos(ky * y))
    s, e = xp.sin(kz * z), xp.exp(xp.cos(kz * z))
    c = s * e
    a2 = kx**2 * (xp.cos(kx * x) ** 2 - xp.sin(kx * x)) * a
    b2 = ky**2 * (xp.sin(ky * y) ** 2 - xp.cos(ky * y)) * b
    c2 = -(kz**2) * e * s * (3 * xp.cos(kz * z) - s**2 + 1)
    return a * b * c, a2 * b * c + a * b2 * c + a * b * c2


def main() -> int:
    """Solve on every grid with both operators; 1 unless both converge as they should."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64], help="points per axis, one grid each (default: 8 16 32 64)")
    p.add_argument("--pdims", default=None, help="process grid RxC (default: the autotuner's)")
    p.add_argument("--lam", type=float, default=0.0, help="the Helmholtz term (default: 0)")
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    pdims = None if args.pdims is None else tuple(int(v) for v in args.pdims.split("x"))
    if cudecomp.CPU_ONLY:
        xp: Any = np
    else:
        import cupy

        cupy.cuda.Device(comm.Get_rank() % cupy.cuda.runtime.getDeviceCount()).use()
        xp = cupy
    errors: dict[str, list[float]] = {"spectral": [], "fd2": []}
    with cudecomp.Handle(comm) as handle:
        for n in args.sizes:
            for op in ("spectral", "fd2"):
                with cudecomp.fft.Poisson(
                    handle, (n, n, n), pdims, bc=("periodic", "neumann", "dirichlet"), operator=op, lengths=LENGTHS, lam=args.lam
                ) as solver:
                    x, y, z = solver.plan.coordinates(LENGTHS)
                    u, lap = exact(x, y, z, xp)
                    u = xp.broadcast_to(u, solver.plan.input_info.array_shape)
                    f = xp.ascontiguousarray(lap - args.lam * u)
                    got = solver.solve(f)
                    local = float(abs(got - u).max()) if got.size else 0.0
                    errors[op].append(comm.allreduce(local, op=MPI.MAX) / comm.allreduce(float(abs(u).max()), op=MPI.MAX))
    if comm.rank == 0:
        print("grid    spectral error   fd2 error   fd2 ratio")
        for i, n in enumerate(args.sizes):
            ratio = f"{errors['fd2'][i - 1] / errors['fd2'][i]:9.2f}" if i else "        -"
            print(f"{n:4d}^3   {errors['spectral'][i]:12.3e}   {errors['fd2'][i]:10.3e}   {ratio}")
    ratios = [errors["fd2"][i - 1] / errors["fd2"][i] for i in range(1, len(args.sizes))]
    ok = errors["spectral"][-1] < 1e-9 and all(3.5 < r < 4.5 for r in ratios[1:] or ratios)
    if comm.rank == 0:
        print("passed" if ok else "FAILED: expected spectral convergence and second-order fd2 errors")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
