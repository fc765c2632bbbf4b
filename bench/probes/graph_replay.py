"""Host time per operation: eager calls against the replay of a CUDA graph of them.

Captures N transposes (X->Y then Y->X, alternating) of tiny 8^3 arrays on an NCCL grid
into one graph with CuPy and compares the wall time per operation of eager calls (the
library's host path) with the graph's replay; also checks the replay's result.

Usage: mpirun -np 2 python bench/probes/graph_replay.py [--n 100] [--gdims 8]
"""

from __future__ import annotations

import argparse
import faulthandler
import sys
import time

import cupy as cp
import numpy as np
from mpi4py import MPI

import cudecomp


def main() -> None:
    """Time eager calls and graph replays; print per-operation microseconds (rank 0)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="operations in the graph (default: 100)")
    ap.add_argument("--gdims", type=int, default=8, help="grid points per axis (default: 8)")
    ap.add_argument("--backend", default="NCCL", help="transpose backend (default: NCCL)")
    ap.add_argument("--trace", type=float, default=0, help="dump stacks after this many seconds (0: never)")
    args = ap.parse_args()
    if args.trace:
        faulthandler.dump_traceback_later(args.trace, exit=True)
    comm = MPI.COMM_WORLD

    def step(what: str) -> None:
        if args.trace:
            print(f"[rank {comm.rank}] {what}", file=sys.stderr, flush=True)

    cp.cuda.Device(comm.rank % cp.cuda.runtime.getDeviceCount()).use()
    n = args.gdims
    with cudecomp.Handle(comm) as h:
        c = cudecomp.GridDescConfig()
        c.gdims, c.pdims = (n, n, n), (comm.size, 1)
        c.transpose_comm_backend = cudecomp.TransposeCommBackend[args.backend]
        with h.create_grid(c) as g:
            ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
            x = cp.arange(ia.size, dtype=np.float64).reshape(ia.array_shape)
            x0 = x.copy()
            y = cp.zeros(ib.array_shape)
            s = cp.cuda.Stream(non_blocking=True)

            def ops() -> None:
                for _ in range(args.n // 2):
                    g.transpose_x_to_y(x, y, stream=s)
                    g.transpose_y_to_x(y, x, stream=s)

            step("warm-up")
            ops()
            s.synchronize()
            step("eager")
            eager = []
            for _ in range(5):
                comm.Barrier()
                t0 = time.perf_counter()
                ops()
                s.synchronize()
                eager.append((time.perf_counter() - t0) / args.n * 1e6)
            step("capture")
            s.begin_capture()
            ops()
            graph = s.end_capture()
            step("replay")
            replay = []
            for _ in range(5):
                comm.Barrier()
                t0 = time.perf_counter()
                graph.launch(s)
                s.synchronize()
                replay.append((time.perf_counter() - t0) / args.n * 1e6)
            ok = bool(cp.array_equal(x, x0))
            del graph  # graphs go before the handle (NCCL's communicator) is finalized
    res = comm.gather((float(np.median(eager)), float(np.median(replay)), ok))
    if comm.rank == 0:
        e = max(r[0] for r in res)
        r = max(r[1] for r in res)
        print(
            f"{comm.size} ranks, {n}^3 float64, {args.backend}, {args.n} transposes: eager {e:.1f} us/op, "
            f"graph replay {r:.1f} us/op ({e / r:.1f}x); replay results {'exact' if all(x[2] for x in res) else 'WRONG'}"
        )


if __name__ == "__main__":
    main()
