"""cudecomp halo updates: the 3-D heat equation with a 7-point finite-difference stencil.

Run under MPI, e.g.::

    mpiexec -n 4 python examples/halo_stencil.py
    mpiexec -n 4 python examples/halo_stencil.py --boundary dirichlet --pencil z --backend MPI_BLOCKING

The example solves u_t = nu * (u_xx + u_yy + u_zz) on an n^3 grid distributed as pencils
with halo extent 1 along all three axes, by explicit Euler steps of the 7-point Laplacian.
Each step first refreshes the halos with ``update_halos_<pencil>`` along X, Y and Z (the
three calls also fill edges and corners), then updates the owned cells from their
neighbours. Two set-ups:

- ``periodic``: [0, 2pi)^3, all halos periodic (along the pencil's own axis, which is not
  split, the update wraps the rank's own data);
- ``dirichlet``: [0, pi]^3 with u = 0 on the boundary; the grid holds the interior nodes
  and the halo cells beyond the domain are the boundary values, which non-periodic halo
  updates leave untouched.

Each row of the pencil's contiguous axis is padded to a multiple of ``--align`` elements;
padding cells hold NaN, which neither the halo updates nor the stencil may touch.

The initial field is the mode sin(kx x) sin(ky y) sin(kz z), which the discrete scheme
damps by an exactly known factor per step and the PDE by exp(-nu |k|^2 t). The example
checks the distributed solution against both and exits with status 1 if the error
exceeds the tolerances (or padding changed).

Works with the CPU variant (NumPy arrays) and the GPU variant (CuPy arrays; each rank
uses GPU ``local rank % GPU count``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

import numpy as np
from mpi4py import MPI

import cudecomp

if cudecomp.CPU_ONLY:
    xp: Any = np
else:  # pragma: no cover - needs a GPU
    import cupy

    xp = cupy

HALO = (1, 1, 1)  # halo extents along X, Y, Z (global order), one cell for the 7-point stencil


def select_gpu(comm: MPI.Comm) -> None:
    """GPU variant: make GPU ``local rank % GPU count`` current (before the Handle is created)."""
    if cudecomp.CPU_ONLY:
        return
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    xp.cuda.Device(local.rank % xp.cuda.runtime.getDeviceCount()).use()
    local.Free()


def default_pdims(nranks: int) -> tuple[int, int]:
    """Return the most square process grid P_rows x P_cols (P_rows <= P_cols) of ``nranks`` ranks."""
    rows = next(r for r in range(int(nranks**0.5), 0, -1) if nranks % r == 0)
    return rows, nranks // rows


def row_padding(info: cudecomp.PencilInfo, align: int) -> tuple[int, int, int]:
    """Return padding (global order) that makes the stored length of the contiguous axis a multiple of ``align``."""
    fastest = info.order[0]  # global axis stored contiguously
    stored = info.shape[0]  # owned cells and both halos (``info`` was queried without padding)
    padding = [0, 0, 0]
    padding[fastest] = -stored % max(align, 1)
    return padding[0], padding[1], padding[2]


def interior(info: cudecomp.PencilInfo) -> tuple[slice, slice, slice]:
    """Return the array index of the owned cells (array axis ``2 - p`` stores global axis ``order[p]``)."""
    sl = [slice(0)] * 3
    for p in range(3):
        h = info.halo_extents[info.order[p]]
        sl[2 - p] = slice(h, h + info.hi[p] - info.lo[p] + 1)
    return sl[0], sl[1], sl[2]


def shifted(info: cudecomp.PencilInfo, axis: int, step: int) -> tuple[slice, slice, slice]:
    """Return the index of the owned cells' neighbours ``step`` cells away along global ``axis``."""
    sl = list(interior(info))
    a = 2 - info.order.index(axis)
    sl[a] = slice(sl[a].start + step, sl[a].stop + step)
    return sl[0], sl[1], sl[2]


def padding_mask(info: cudecomp.PencilInfo) -> np.ndarray:
    """Return the mask of padding cells (the last ``padding`` cells along each axis)."""
    mask = np.zeros(info.array_shape, dtype=bool)
    for p in range(3):
        pad = info.padding[info.order[p]]
        if pad:
            index: list[Any] = [slice(None)] * 3
            index[2 - p] = slice(info.shape[p] - pad, None)
            mask[tuple(index)] = True
    return mask


def mode(info: cudecomp.PencilInfo, h: float, offset: int, k: tuple[int, int, int]) -> np.ndarray:
    """Evaluate sin(kx x) sin(ky y) sin(kz z) on the owned cells; node i sits at x = (i + offset) * h."""
    out = np.ones(1)
    for p in range(3):
        axis = info.order[p]
        x = (np.arange(info.lo[p], info.hi[p] + 1) + offset) * h
        shape = [1, 1, 1]
        shape[2 - p] = x.size
        out = out * np.sin(k[axis] * x).reshape(shape)
    return out


def parse_args(comm: MPI.Comm) -> argparse.Namespace:
    """Command-line options (same on every rank); checks that ``--pdims`` fits the rank count."""
    halo_backends = [b.name for b in cudecomp.HaloCommBackend]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=32, help="grid points per axis (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=40, help="time steps (default: %(default)s)")
    ap.add_argument("--nu", type=float, default=1.0, help="diffusivity (default: %(default)s)")
    ap.add_argument("--cfl", type=float, default=0.15, help="time step as a fraction of h^2/nu; stable below 1/6 (default: %(default)s)")
    ap.add_argument(
        "--k", type=int, nargs=3, default=(1, 2, 1), metavar=("KX", "KY", "KZ"), help="wave numbers of the mode (default: %(default)s)"
    )
    ap.add_argument("--boundary", choices=("periodic", "dirichlet"), default="periodic", help="boundary conditions (default: %(default)s)")
    ap.add_argument("--pencil", choices=("x", "y", "z"), default="x", help="pencil the field is stored in (default: %(default)s)")
    ap.add_argument("--pdims", type=int, nargs=2, metavar=("ROWS", "COLS"), help="process grid (default: most square factorisation)")
    ap.add_argument("--backend", default="MPI", choices=halo_backends, help="halo backend (default: %(default)s)")
    ap.add_argument(
        "--align", type=int, default=8, help="pad contiguous rows to a multiple of this many elements; 1: no padding (default: %(default)s)"
    )
    ap.add_argument("--tol", type=float, default=1e-2, help="tolerance of the error against the PDE's solution (default: %(default)s)")
    args = ap.parse_args()
    if args.pdims and args.pdims[0] * args.pdims[1] != comm.size:
        if comm.rank == 0:
            ap.error(f"--pdims {args.pdims[0]} {args.pdims[1]}: the product must be the number of ranks, {comm.size}")
        sys.exit(2)
    return args


def main() -> int:
    """Run the example on every rank; return the exit status (0: errors within tolerance)."""
    comm = MPI.COMM_WORLD
    args = parse_args(comm)
    n, k, nu = args.n, tuple(args.k), args.nu
    pdims = tuple(args.pdims) if args.pdims else default_pdims(comm.size)
    periodic = args.boundary == "periodic"
    if periodic:
        h, offset = 2 * math.pi / n, 0  # nodes 0 .. n-1 of [0, 2pi); node n is node 0
    else:
        h, offset = math.pi / (n + 1), 1  # interior nodes 1 .. n of [0, pi]; nodes 0 and n+1 are the boundary
    periods = (periodic,) * 3
    dt = args.cfl * h * h / nu
    axis = "xyz".index(args.pencil)
    select_gpu(comm)

    with cudecomp.Handle(comm) as handle:
        config = cudecomp.GridDescConfig()
        config.gdims = (n, n, n)
        config.pdims = pdims
        config.halo_comm_backend = cudecomp.HaloCommBackend[args.backend]
        with handle.create_grid(config) as grid:
            update_halos = getattr(grid, f"update_halos_{args.pencil}")
            padding = row_padding(grid.get_pencil_info(axis, HALO), args.align)
            info = grid.get_pencil_info(axis, HALO, padding)
            inner = interior(info)
            pad = padding_mask(info)

            # Owned cells: the mode; halo cells: 0 (the boundary value where not periodic); padding: NaN.
            u0 = mode(info, h, offset, k)
            host = np.zeros(info.array_shape)
            host[inner] = u0
            host[pad] = np.nan
            u = xp.asarray(host)
            neighbours = [(shifted(info, a, -1), shifted(info, a, +1)) for a in range(3)]

            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                for dim in range(3):
                    update_halos(u, HALO, periods, dim, padding=padding)
                centre = u[inner]
                laplacian = sum(u[lo] + u[hi] - 2 * centre for lo, hi in neighbours) / (h * h)
                u[inner] = centre + (nu * dt) * laplacian
            if not cudecomp.CPU_ONLY:
                xp.cuda.get_current_stream().synchronize()
            seconds = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)

            result = xp.asnumpy(u) if xp is not np else u
    # Discrete scheme: the mode is an eigenvector of the 7-point Laplacian (also with the
    # zero boundary nodes), so each step multiplies it by `growth`.
    eigenvalue = sum((2 * math.cos(k[a] * h) - 2) / (h * h) for a in range(3))
    growth = 1 + nu * dt * eigenvalue
    t = args.steps * dt
    scheme_error = comm.allreduce(float(np.abs(result[inner] - growth**args.steps * u0).max()), op=MPI.MAX)
    decay = math.exp(-nu * sum(q * q for q in k) * t)  # the PDE damps the mode by this factor
    pde_error = comm.allreduce(float(np.abs(result[inner] - decay * u0).max()), op=MPI.MAX)
    padding_kept = comm.allreduce(bool(np.isnan(result[pad]).all()), op=MPI.LAND)
    passed = scheme_error < 1e-10 and pde_error < args.tol and padding_kept

    if comm.rank == 0:
        variant = "CPU (NumPy)" if cudecomp.CPU_ONLY else "GPU (CuPy)"
        print(
            f"cudecomp {cudecomp.__version__} [{variant}], {comm.size} ranks, grid {n}^3, pdims {pdims[0]}x{pdims[1]}, "
            f"{args.pencil.upper()}-pencils, halo backend {cudecomp.halo_comm_backend_to_string(config.halo_comm_backend)}"
        )
        print(
            f"heat equation, {args.boundary}, mode k={k}, halo {HALO}, padding {padding}, "
            f"{args.steps} steps of dt={dt:.3g} to t={t:.4f}: {seconds * 1e3 / max(args.steps, 1):.2f} ms/step"
        )
        print(f"max |u - exact discrete solution| = {scheme_error:.2e}  (tolerance 1e-10)")
        print(f"max |u - PDE solution|            = {pde_error:.2e}  (tolerance {args.tol:g}; amplitude now {decay:.4f})")
        print(f"padding cells untouched: {'yes' if padding_kept else 'NO'}")
        print("halo_stencil", "PASSED" if passed else "FAILED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
