"""Interleaved A/B timing of single-copy DIRECT transposes under environment settings.

On a noisy host, runs minutes apart differ by more than the effects sought; this probe
alternates the settings within one job, round after round, on the same library arrays,
and reports each setting's median over all rounds (slowest rank per call).

Usage: ``CUDECOMP_HOST_THREADS=1 mpirun -np 16 python3 bench/probes/single_copy_ab.py
--n 512 --pdims 4x4 --dtype f64 --op xy --env CUDECOMP_SINGLE_COPY_BLOCK_BYTES=0,524288``
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from mpi4py import MPI

import cudecomp


def main() -> None:
    """Print one line per setting on rank 0."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--pdims", default="4x4")
    ap.add_argument("--dtype", default="f64")
    ap.add_argument("--op", default="xy", choices=["xy", "yz"])
    ap.add_argument("--env", required=True, help="NAME=v1,v2,... (unset: the variable removed)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out-none", action="store_true", help="call transposes without out (a fresh output each call)")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    name, values = a.env.split("=", 1)
    settings = values.split(",")
    comm = MPI.COMM_WORLD
    pr, pc = (int(v) for v in a.pdims.split("x"))
    dt = {"c128": np.complex128, "f64": np.float64, "c64": np.complex64, "f32": np.float32}[a.dtype]
    h = cudecomp.Handle(comm)
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = (a.n, a.n, a.n), (pr, pc)
    cfg.transpose_comm_backend = cudecomp.TransposeCommBackend.DIRECT
    g = h.create_grid(cfg)
    fa, fb = (0, 1) if a.op == "xy" else (1, 2)
    fn = g.transpose_x_to_y if a.op == "xy" else g.transpose_y_to_z
    x, y = g.empty_pencil(fa, dt), g.empty_pencil(fb, dt)
    x[...] = 1
    times: dict[str, list[float]] = {v: [] for v in settings}
    for r in range(a.rounds + 1):
        for v in settings:
            if v == "unset":
                os.environ.pop(name, None)
            else:
                os.environ[name] = v
            for _ in range(a.reps):
                comm.Barrier()
                t0 = time.perf_counter()
                if a.out_none:
                    fn(x)
                else:
                    fn(x, y)
                t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                if r > 0:  # round 0 warms up
                    times[v].append(t)
    if comm.rank == 0:
        print(f"# {comm.size} ranks, {a.n}^3 {a.dtype} {a.op}, pdims {a.pdims}, {a.rounds} rounds x {a.reps}")
        for v in settings:
            ts = np.array(times[v]) * 1e3
            print(f"{name}={v:>10s}  median {np.median(ts):8.3f} ms  (p25 {np.percentile(ts, 25):.3f}, p75 {np.percentile(ts, 75):.3f})")
    g.destroy()
    h.finalize()


if __name__ == "__main__":
    main()
