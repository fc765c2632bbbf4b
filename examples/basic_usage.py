"""cudecomp basic usage: a pencil decomposition and the four transposes, checked cell by cell.

Run under MPI, e.g.::

    mpiexec -n 4 python examples/basic_usage.py
    mpiexec -n 4 python examples/basic_usage.py --pdims 1 4 --gdims 64 48 40 --backend MPI_A2A

The example

1. creates a handle and a P_rows x P_cols pencil grid (``--pdims``, or the most square
   factorisation of the number of ranks),
2. queries the X-, Y- and Z-pencil of every rank and prints them (rank 0),
3. fills an X-pencil with a function of the global coordinates and runs
   X->Y->Z->Y->X, checking every cell after every transpose, in four variants:
   ``plain`` (outputs allocated by the library), ``halos`` (each pencil carries halo
   cells), ``halos+padding`` (halos and padding) and ``in-place`` (one buffer holds every
   pencil); halo and padding cells of the outputs must come back untouched,
4. prints a report on rank 0 and exits with status 1 if any cell was wrong.

Works with the CPU variant (NumPy arrays) and the GPU variant (CuPy arrays; each rank
uses GPU ``local rank % GPU count``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

import cudecomp

if cudecomp.CPU_ONLY:
    xp: Any = np
else:  # pragma: no cover - needs a GPU
    import cupy

    xp = cupy

DTYPES = {"float32": np.float32, "float64": np.float64, "complex64": np.complex64, "complex128": np.complex128}
SENTINEL = -1.0  # value of halo and padding cells: a transpose must leave them alone
Triple = tuple[int, int, int]


@dataclass
class Variant:
    """Halos and padding (global order X, Y, Z) of the X-, Y- and Z-pencils, and the buffer strategy."""

    name: str
    halos: tuple[Triple, Triple, Triple] = ((0, 0, 0),) * 3
    padding: tuple[Triple, Triple, Triple] = ((0, 0, 0),) * 3
    in_place: bool = False
    allocate_outputs: bool = False


VARIANTS = [
    Variant("plain", allocate_outputs=True),
    Variant("halos", halos=((1, 1, 1), (2, 0, 2), (0, 1, 3))),
    Variant("halos+padding", halos=((1, 1, 1), (0, 2, 0), (1, 0, 1)), padding=((3, 0, 0), (0, 1, 2), (2, 2, 0))),
    Variant("in-place", in_place=True),
]


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


def global_ranges(info: cudecomp.PencilInfo) -> list[tuple[int, int]]:
    """Owned (lo, hi) inclusive global index range along X, Y and Z.

    ``PencilInfo.lo``/``hi`` are in the pencil's memory order; ``order[p]`` is the global
    axis stored at position ``p`` (fastest first).
    """
    ranges = [(0, 0)] * 3
    for p in range(3):
        ranges[info.order[p]] = (info.lo[p], info.hi[p])
    return ranges


def global_coords(info: cudecomp.PencilInfo) -> tuple[list[np.ndarray], np.ndarray]:
    """Global X, Y and Z coordinate of every cell of a pencil array, and the mask of owned cells.

    The array is C-contiguous with shape ``info.array_shape`` (memory order reversed), so
    array axis ``2 - p`` holds global axis ``info.order[p]``. Along each axis the stored
    cells are: halo, owned interior, halo, padding. Halo and padding cells get the
    coordinates they would have (outside the owned range).
    """
    k, j, i = np.indices(info.array_shape)
    position = (i, j, k)  # position along memory-order axis p
    coords: list[np.ndarray] = [np.empty(0)] * 3
    owned = np.ones(info.array_shape, dtype=bool)
    for p in range(3):
        axis = info.order[p]
        c = position[p] + info.lo[p] - info.halo_extents[axis]
        coords[axis] = c
        owned &= (c >= info.lo[p]) & (c <= info.hi[p])
    return coords, owned


def field(x: np.ndarray, y: np.ndarray, z: np.ndarray, gdims: Sequence[int], dtype: type) -> np.ndarray:
    """Evaluate the test function of the global coordinates: the linear index x + X*(y + Y*z), exact in every dtype here.

    Complex types get the negated index as imaginary part, so that both halves travel.
    """
    idx = (x + gdims[0] * (y + gdims[1] * z)).astype(np.float64)
    return (idx - 1j * idx if np.issubdtype(dtype, np.complexfloating) else idx).astype(dtype)


def expected(info: cudecomp.PencilInfo, gdims: Sequence[int], dtype: type) -> np.ndarray:
    """Return what a pencil array must hold: the field on owned cells, ``SENTINEL`` on halo and padding cells."""
    (x, y, z), owned = global_coords(info)
    out = np.full(info.array_shape, SENTINEL, dtype=dtype)
    out[owned] = field(x[owned], y[owned], z[owned], gdims, dtype)
    return out


def to_host(a: Any) -> np.ndarray:
    """Return the array as a NumPy array (a device-to-host copy in the GPU variant)."""
    return a if isinstance(a, np.ndarray) else xp.asnumpy(a)


def run_cycle(grid: cudecomp.GridDesc, gdims: Sequence[int], dtype: type, v: Variant) -> list[bool]:
    """Run X->Y->Z->Y->X once in variant ``v``; return, per transpose, whether this rank's arrays were exact.

    Out of place, the input must also come back unchanged.
    """
    infos = [grid.get_pencil_info(a, v.halos[a], v.padding[a]) for a in range(3)]
    steps: list[tuple[Callable[..., Any], int, int]] = [
        (grid.transpose_x_to_y, 0, 1),
        (grid.transpose_y_to_z, 1, 2),
        (grid.transpose_z_to_y, 2, 1),
        (grid.transpose_y_to_x, 1, 0),
    ]
    if v.in_place:
        # In place: every pencil is a view of the start of one buffer big enough for the largest.
        buffer = xp.empty(max(info.size for info in infos), dtype)

        def pencil(a: int) -> Any:
            """Return pencil ``a`` as a view of the start of ``buffer``."""
            return buffer[: infos[a].size].reshape(infos[a].array_shape)

        current = pencil(0)
        current[...] = xp.asarray(expected(infos[0], gdims, dtype))
    else:
        current = xp.asarray(expected(infos[0], gdims, dtype))

    results = []
    for transpose, a, b in steps:
        if v.in_place:
            out = pencil(b)
        elif v.allocate_outputs:
            out = None  # the library allocates the output (its halos and padding are then uninitialised)
        else:
            out = xp.full(infos[b].array_shape, SENTINEL, dtype)
        out = transpose(
            current,
            out,
            input_halo_extents=v.halos[a],
            output_halo_extents=v.halos[b],
            input_padding=v.padding[a],
            output_padding=v.padding[b],
        )
        want = expected(infos[b], gdims, dtype)
        got = to_host(out)
        if v.allocate_outputs:  # only the owned cells are defined
            owned = global_coords(infos[b])[1]
            ok = np.array_equal(got[owned], want[owned])
        else:
            ok = np.array_equal(got, want)
        if not v.in_place:
            ok = ok and np.array_equal(to_host(current), expected(infos[a], gdims, dtype))
        results.append(bool(ok))
        current = out
    return results


def describe_pencils(grid: cudecomp.GridDesc, comm: MPI.Comm) -> list[str]:
    """Lines (rank 0; empty elsewhere) listing every rank's X-, Y- and Z-pencil as global index ranges."""
    mine = [global_ranges(grid.get_pencil_info(a)) for a in range(3)]
    everyone = comm.gather(mine, root=0)
    if comm.rank != 0:
        return []

    def text(r: list[tuple[int, int]]) -> str:
        """Format (lo, hi) ranges as ``lo:hi`` columns."""
        return " ".join(f"{lo}:{hi}" for lo, hi in r)

    w = max(len(text(r)) for ranks in everyone for r in ranks) + 2
    lines = [(f"{'rank':>4}  " + "".join(f"{name + '-pencil x y z':<{w}}" for name in "XYZ")).rstrip()]
    for rank, pencils in enumerate(everyone):
        lines.append((f"{rank:>4}  " + "".join(f"{text(r):<{w}}" for r in pencils)).rstrip())
    return lines


def parse_args(comm: MPI.Comm) -> argparse.Namespace:
    """Command-line options (same on every rank); checks that ``--pdims`` fits the rank count."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--gdims", type=int, nargs=3, default=(40, 36, 32), metavar=("X", "Y", "Z"), help="global grid extents (default: %(default)s)"
    )
    ap.add_argument("--pdims", type=int, nargs=2, metavar=("ROWS", "COLS"), help="process grid (default: most square factorisation)")
    ap.add_argument(
        "--backend",
        default="MPI_P2P",
        choices=[b.name for b in cudecomp.TransposeCommBackend],
        help="transpose backend (default: %(default)s)",
    )
    ap.add_argument("--dtype", default="complex128", choices=list(DTYPES), help="element type (default: %(default)s)")
    ap.add_argument("--axis-contiguous", action="store_true", help="store each pencil's own axis contiguously")
    args = ap.parse_args()
    if args.pdims and args.pdims[0] * args.pdims[1] != comm.size:
        if comm.rank == 0:
            ap.error(f"--pdims {args.pdims[0]} {args.pdims[1]}: the product must be the number of ranks, {comm.size}")
        sys.exit(2)
    return args


def main() -> int:
    """Run the example on every rank; return the exit status (0: every cell right)."""
    comm = MPI.COMM_WORLD
    args = parse_args(comm)
    dtype = DTYPES[args.dtype]
    pdims = tuple(args.pdims) if args.pdims else default_pdims(comm.size)
    select_gpu(comm)

    with cudecomp.Handle(comm) as handle:
        config = cudecomp.GridDescConfig()
        config.gdims = args.gdims
        config.pdims = pdims
        config.transpose_comm_backend = cudecomp.TransposeCommBackend[args.backend]
        config.transpose_axis_contiguous = (args.axis_contiguous,) * 3
        with handle.create_grid(config) as grid:
            lines = describe_pencils(grid, comm)
            results = {v.name: run_cycle(grid, args.gdims, dtype, v) for v in VARIANTS}
    # Every rank agrees on every result, so all ranks return the same status.
    results = {name: [bool(comm.allreduce(ok, op=MPI.LAND)) for ok in oks] for name, oks in results.items()}
    passed = all(all(oks) for oks in results.values())

    if comm.rank == 0:
        variant = "CPU (NumPy)" if cudecomp.CPU_ONLY else "GPU (CuPy)"
        gx, gy, gz = args.gdims
        print(
            f"cudecomp {cudecomp.__version__} [{variant}], {comm.size} ranks, gdims {gx}x{gy}x{gz}, pdims {pdims[0]}x{pdims[1]}, "
            f"{cudecomp.transpose_comm_backend_to_string(config.transpose_comm_backend)}, {args.dtype}"
        )
        print("\n".join(lines))
        print(f"{'variant':<15}" + "".join(f"{s:>7}" for s in ("X->Y", "Y->Z", "Z->Y", "Y->X")))
        for name, oks in results.items():
            print(f"{name:<15}" + "".join(f"{'ok' if ok else 'WRONG':>7}" for ok in oks))
        print("basic_usage", "PASSED" if passed else "FAILED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
