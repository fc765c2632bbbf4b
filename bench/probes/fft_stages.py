"""Where a distributed forward FFT spends its time: each stage of the plan timed alone.

Times, with CUDA events on every rank (slowest rank's median), the local FFT stages and
the transposes of a ``cudecomp.fft.FFT`` plan's forward transform (transposed output),
then the whole forward call, so that the sum of the stages can be compared with the call
and with a stage-overlapping schedule's lower bound.

Usage: mpirun -np 2 python bench/probes/fft_stages.py [--n 1024] [--pdims 1x2] [--backend DIRECT]
"""

from __future__ import annotations

import argparse

import cupy as cp
import cupyx.scipy.fft as cfft
import numpy as np
from mpi4py import MPI

import cudecomp
from cudecomp.fft import FFT


def main() -> None:
    """Print per-stage milliseconds (rank 0)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024, help="grid points per axis (default: 1024)")
    ap.add_argument("--pdims", default="1x2", help="process grid (default: 1x2)")
    ap.add_argument("--backend", default="DIRECT", help="transpose backend (default: DIRECT)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions (default: 5)")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    cp.cuda.Device(comm.rank % cp.cuda.runtime.getDeviceCount()).use()
    pdims = tuple(int(v) for v in args.pdims.split("x"))
    n = args.n
    s = cp.cuda.get_current_stream()

    def timed(fn) -> float:  # type: ignore[no-untyped-def]
        fn()
        s.synchronize()
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        ts = []
        for _ in range(args.reps):
            comm.Barrier()
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1))
        return comm.allreduce(float(np.median(ts)), op=MPI.MAX)

    with cudecomp.Handle(comm) as h:
        backend = cudecomp.TransposeCommBackend[args.backend]
        plan = FFT(h, (n, n, n), pdims, kind="c2c", dtype=np.complex128, transposed_out=True, backend=backend)
        G = plan.spectral_grid
        a = plan.zeros_input()
        a += 1
        out = plan.empty_output()
        res: dict[str, float] = {"schedule": 0.0}
        sch = plan.schedule
        if sch == "slab-xy":
            zinfo = G.get_pencil_info(2)
            z = cp.empty(zinfo.array_shape, out.dtype)
            b = cfft.fftn(a, axes=(1, 2))
            res["fft2 (y,x)"] = timed(lambda: cfft.fftn(a, axes=(1, 2)))
            res["Y->Z"] = timed(lambda: G.transpose_y_to_z(b, z))
            zax = 2 - list(zinfo.order).index(2)
            res[f"fft1 z (array axis {zax}) in place"] = timed(lambda: cfft.fft(z, axis=zax, overwrite_x=True))
        elif sch == "slab-yz":
            y = cp.empty_like(out)
            b = cfft.fft(a, axis=2)
            res["fft1 x"] = timed(lambda: cfft.fft(a, axis=2))
            res["X->Y"] = timed(lambda: G.transpose_x_to_y(b, y))
            res["fft2 (z,y) in place"] = timed(lambda: cfft.fftn(y, axes=(1, 2), overwrite_x=True))
        res["plan.forward into out"] = timed(lambda: plan.forward(a, out))
        res["plan.forward new"] = timed(lambda: plan.forward(a))
        res["copy pencil"] = timed(lambda: cp.copyto(out.reshape(-1)[: a.size].reshape(a.shape), a))
        plan.destroy()
    if comm.rank == 0:
        print(f"{comm.size} ranks, {n}^3 c128, pdims {args.pdims}, {args.backend}, schedule {sch}")
        for k, v in res.items():
            if k != "schedule":
                print(f"  {k:<24}{v:9.3f} ms")


if __name__ == "__main__":
    main()
