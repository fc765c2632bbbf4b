"""Aggregate host copy bandwidth with every rank copying at once.

Run with as many ranks as the transpose it is compared with:
``mpirun -np 16 python3 bench/probes/host_bandwidth.py``. Each rank copies arrays of
``--mib`` MiB (default 16: a 256³ complex128 pencil over 16 ranks) with NumPy, all ranks
together between barriers; prints the slowest rank's median time and the aggregate rate
(bytes copied by all ranks / time). A distributed transpose whose staging stays in cache
reads every input cell and writes every output cell once, like this copy.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI


def main() -> None:
    """Print the table on rank 0."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, nargs="+", default=[16, 8])
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    for mib in args.mib:
        n = mib << 20
        src = np.ones(n, np.uint8)
        dst = np.zeros(n, np.uint8)
        times = []
        for _ in range(args.reps + 3):
            comm.Barrier()
            t0 = time.perf_counter()
            np.copyto(dst, src)
            t1 = time.perf_counter()
            times.append(comm.allreduce(t1 - t0, op=MPI.MAX))
        t = float(np.median(times[3:]))
        if comm.rank == 0:
            total = n * comm.size
            print(f"{comm.size} ranks x {mib} MiB: {t * 1e3:7.3f} ms, aggregate {total / t / 1e9:7.1f} GB/s copied")


if __name__ == "__main__":
    main()
