"""Cost per call of the checking mode (CUDECOMP_CHECK_COLLECTIVES=1).

Tiny 8^3 X->Y transposes and halo updates timed with the mode off and on, same run.

Usage: mpiexec -n N python bench/probes/check_collectives.py [--reps 2000]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from mpi4py import MPI

import cudecomp


def timed(mode: str, reps: int) -> tuple[float, float]:
    """Median microseconds per transpose and per halo update with the mode set to `mode`."""
    os.environ["CUDECOMP_CHECK_COLLECTIVES"] = mode
    comm = MPI.COMM_WORLD
    with cudecomp.Handle(comm) as h:
        c = cudecomp.GridDescConfig()
        c.gdims, c.pdims = (8, 8, 8), (comm.size, 1)
        with h.create_grid(c) as g:
            x = np.zeros(g.get_pencil_info(0).array_shape)
            y = np.zeros(g.get_pencil_info(1).array_shape)
            hx = np.zeros(g.get_pencil_info(0, (1, 1, 1)).array_shape)
            out = []
            for call in (lambda: g.transpose_x_to_y(x, y), lambda: g.update_halos_x(hx, (1, 1, 1), (True,) * 3, 1)):
                for _ in range(50):
                    call()
                samples = []
                for _ in range(5):
                    comm.Barrier()
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        call()
                    samples.append((time.perf_counter() - t0) / reps * 1e6)
                out.append(comm.allreduce(float(np.median(samples)), op=MPI.MAX))
    return out[0], out[1]


def main() -> None:
    """Time both modes and print the difference (rank 0)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000, help="calls per sample (default: 2000)")
    args = ap.parse_args()
    off, on = timed("0", args.reps), timed("1", args.reps)
    if MPI.COMM_WORLD.rank == 0:
        n = MPI.COMM_WORLD.size
        print(
            f"{n} ranks, 8^3 float64: transpose {off[0]:.1f} -> {on[0]:.1f} us (+{on[0] - off[0]:.1f}); "
            f"halo {off[1]:.1f} -> {on[1]:.1f} us (+{on[1] - off[1]:.1f})"
        )


if __name__ == "__main__":
    main()
