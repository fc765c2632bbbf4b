"""The host copy floor of a distributed transpose, all ranks copying at once.

Every rank copies its own pencil with cudecomp's copy kernel (a 1×1 grid of its own).
Run with the ranks and copy threads of the transpose it is compared with, e.g.
``CUDECOMP_HOST_THREADS=1 mpirun -np 16 python3 bench/probes/host_floor.py --n 256``.
Each rank holds an ``n × n × n/ranks`` pencil; an X→Y transpose on a 1×1 grid with the
default layout is one dense copy, with the streaming stores cudecomp uses for large outputs
(a distributed X→Y moves every cell once from input to output through caches, so this
copy bounds it). Prints the slowest rank's median per dtype.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

import cudecomp


def main() -> None:
    """Print one line per dtype on rank 0."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    n = args.n
    gdims = (n, n, n // world.size)
    h = cudecomp.Handle(MPI.COMM_SELF)
    for name, np_dtype in (("c128", np.complex128), ("f64", np.float64)):
        cfg = cudecomp.GridDescConfig()
        cfg.gdims, cfg.pdims = gdims, (1, 1)
        grid = h.create_grid(cfg)
        x = np.ones(grid.get_pencil_info(0).array_shape, np_dtype)
        y = np.zeros(grid.get_pencil_info(1).array_shape, np_dtype)
        times = []
        for _ in range(args.reps + 3):
            world.Barrier()
            t0 = time.perf_counter()
            grid.transpose_x_to_y(x, y)
            times.append(world.allreduce(time.perf_counter() - t0, op=MPI.MAX))
        t = float(np.median(times[3:]))
        if world.rank == 0:
            mib = x.nbytes / 2**20
            print(f"{world.size} ranks, {mib:.0f} MiB {name} each: {t * 1e3:7.3f} ms, {x.nbytes * world.size / t / 1e9:6.1f} GB/s copied")
        grid.destroy()
    h.finalize()


if __name__ == "__main__":
    main()
