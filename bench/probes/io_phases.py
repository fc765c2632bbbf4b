"""Probe: where a 16-rank cudecomp.io.write of one field goes (fresh path vs overwrite; unlink cost)."""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import cudecomp
import cudecomp.io as cio

comm = MPI.COMM_WORLD
d, n = sys.argv[1], int(sys.argv[2])


def med(f, reps=5):
    """Return the median time in ms of `reps` calls."""
    ts = []
    for i in range(reps):
        comm.Barrier()
        t = time.perf_counter()
        f(i)
        comm.Barrier()
        ts.append(time.perf_counter() - t)
    return 1e3 * sorted(ts)[len(ts) // 2]


with cudecomp.Handle(comm) as h:
    c = cudecomp.GridDescConfig()
    c.gdims = (n, n, n)
    c.pdims = (4, comm.size // 4) if comm.size % 4 == 0 else (1, comm.size)
    with h.create_grid(c) as g:
        u = np.ones(g.get_pencil_info(0).array_shape)
        p = os.path.join(d, "phase.h5")
        r = {}
        r["overwrite"] = med(lambda i: cio.write(p, {"u": u}, g.pencil(0), overwrite=True))
        r["fresh"] = med(lambda i: cio.write(os.path.join(d, f"fresh{i}.h5"), {"u": u}, g.pencil(0)))

        def rm(i):
            """Remove one fresh file (rank 0)."""
            if comm.rank == 0:
                os.remove(os.path.join(d, f"fresh{i}.h5"))

        r["unlink"] = med(rm)
        r["append"] = med(lambda i: cio.write(p, {"u": u}, g.pencil(0), step=i))
        r["read"] = med(lambda i: cio.read(p, "u", g.pencil(0), out=u))
        if comm.rank == 0:
            os.remove(p)
            print(f"{comm.size} ranks {n}^3 f64:", " ".join(f"{k}={v:.1f}ms" for k, v in r.items()), flush=True)
