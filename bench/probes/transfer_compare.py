"""CPU transposes against mpi4py-fft's own ``Pencil.transfer`` (issue #20).

For each dtype and each of X→Y and Y→Z on an ``n³`` grid and a ``PRxPC`` process grid,
prints the slowest rank's median time of:

* ``user``: cudecomp ``DIRECT`` between NumPy arrays made here (two copies: pack into the
  receiver's node-shared workspace, unpack);
* ``library 2-copy``: the same between ``GridDesc.empty_pencil`` arrays with
  ``CUDECOMP_SINGLE_COPY=0``;
* ``library``: between ``empty_pencil`` arrays (one copy, into the receivers' outputs);
* ``mpi4py-fft``: ``Pencil.transfer(...).forward`` (its ``Alltoallw`` of subarray types)
  with the same decomposition: NumPy axes (z, y, x), the X-pencil aligned in axis 2 with
  y over PR ranks and z over PC, so that each exchange runs within groups of the same size;
* ``floor``: every rank copying its own input pencil once, all at once (a 1×1 grid of its
  own, as ``bench/probes/host_floor.py``): what no transpose can beat;
* ``floor shm``: the same copy between arrays of that grid's ``empty_pencil`` (node-shared
  memory, like the library arrays; private NumPy arrays may get transparent huge pages,
  shared memory only where the host's ``shmem_enabled`` allows them).

Usage: ``mpirun -np 16 python3 bench/probes/transfer_compare.py --n 256 --pdims 4x4 --rounds 5``
(needs ``mpi4py-fft``; compare with ``bench/probes/host_floor.py`` at the same ranks).
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

import cudecomp


def main() -> None:
    """Print one line per (dtype, transpose) on rank 0."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--pdims", default="4x4")
    ap.add_argument("--dtypes", nargs="+", default=["c128", "f64"])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1, help="alternate the methods this many times (against drift)")
    a = ap.parse_args()
    from mpi4py_fft.pencil import Pencil, Subcomm

    comm = MPI.COMM_WORLD
    pr, pc = (int(v) for v in a.pdims.split("x"))
    n = a.n

    def samples(fn: Callable[[], object], reps: int) -> list[float]:
        """Slowest rank's time of each of ``reps`` calls after warm-up."""
        for _ in range(a.warmup):
            fn()
        ts = []
        for _ in range(reps):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            ts.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
        return ts

    h = cudecomp.Handle(comm)
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = (n, n, n), (pr, pc)
    cfg.transpose_comm_backend = cudecomp.TransposeCommBackend.DIRECT
    g = h.create_grid(cfg)
    own = cudecomp.Handle(MPI.COMM_SELF)
    sub = Subcomm(comm, [pc, pr, 1])
    px = Pencil(sub, (n, n, n), axis=2)
    py = px.pencil(1)
    pz = py.pencil(0)
    if comm.rank == 0:
        print(f"# {comm.size} ranks, {n}^3, pdims {pr}x{pc}, medians of {a.rounds} rounds x {a.reps} (ms, slowest rank per call)")
        head = f"{'dtype':6s} {'op':4s} {'user':>9s} {'lib 2-copy':>11s} {'library':>9s} {'mpi4py-fft':>11s}"
        head += f" {'floor':>9s} {'floor shm':>9s}"
        print(head + "  ratios mpi4py-fft/(user, library), library/floor, library/floor shm")
    for dname in a.dtypes:
        dt = {"c128": np.complex128, "f64": np.float64, "c64": np.complex64, "f32": np.float32}[dname]
        for op, (fa, fb), (pa, pb) in (("xy", (0, 1), (px, py)), ("yz", (1, 2), (py, pz))):
            name = {"xy": "transpose_x_to_y", "yz": "transpose_y_to_z"}[op]
            fn = getattr(g, name)
            ua = np.ones(g.get_pencil_info(fa).array_shape, dt)
            ub = np.zeros(g.get_pencil_info(fb).array_shape, dt)
            la, lb = g.empty_pencil(fa, dt), g.empty_pencil(fb, dt)
            la[...] = 1
            tr = pa.transfer(pb, dt)
            ma, mb = np.ones(pa.subshape, dt), np.zeros(pb.subshape, dt)

            def two_copy(x: np.ndarray = la, y: np.ndarray = lb, f: Callable[..., object] = fn) -> None:
                os.environ["CUDECOMP_SINGLE_COPY"] = "0"
                try:
                    f(x, y)
                finally:
                    del os.environ["CUDECOMP_SINGLE_COPY"]

            # The copy floor: every rank copies its own pencil once, all at once (a 1x1 grid
            # of its own, as bench/probes/host_floor.py), in the same rounds.
            fcfg = cudecomp.GridDescConfig()
            fcfg.gdims, fcfg.pdims = tuple(reversed(ua.shape)), (1, 1)
            fcfg.transpose_comm_backend = cudecomp.TransposeCommBackend.DIRECT  # empty_pencil: shared memory
            fgrid = own.create_grid(fcfg)
            fa, fb = np.ones(ua.shape, dt), np.zeros(fgrid.get_pencil_info(1).array_shape, dt)
            sa, sb = fgrid.empty_pencil(0, dt), fgrid.empty_pencil(1, dt)
            sa[...], sb[...] = 1, 0
            methods = [
                functools.partial(fn, ua, ub),
                two_copy,
                functools.partial(fn, la, lb),
                functools.partial(tr.forward, ma, mb),
                functools.partial(fgrid.transpose_x_to_y, fa, fb),
                functools.partial(fgrid.transpose_x_to_y, sa, sb),
            ]
            # Round after round, each method in turn: the host's drift between runs minutes
            # apart is larger than the differences sought.
            per = [[] for _ in methods]
            for _ in range(a.rounds):
                for m, acc in zip(methods, per, strict=True):
                    acc += samples(m, a.reps)
            fgrid.destroy()
            t_user, t_two, t_lib, t_pf, t_floor, t_shm = (float(np.median(v)) for v in per)
            if comm.rank == 0:
                ms = [t * 1e3 for t in (t_user, t_two, t_lib, t_pf, t_floor, t_shm)]
                print(
                    f"{dname:6s} {op:4s} {ms[0]:9.3f} {ms[1]:11.3f} {ms[2]:9.3f} {ms[3]:11.3f} {ms[4]:9.3f} {ms[5]:9.3f}"
                    f"  {t_pf / t_user:5.2f}x {t_pf / t_lib:5.2f}x {t_lib / t_floor:5.2f}x {t_lib / t_shm:5.2f}x"
                )
    g.destroy()
    h.finalize()
    own.finalize()


if __name__ == "__main__":
    main()
