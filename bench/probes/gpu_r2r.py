"""Probe: a plan's 3-D DCT-II on one GPU beside cupyx.scipy.fft.dctn and the same-size complex FFT plan (CUDA events, medians)."""

import sys

import cupy
import cupyx.scipy.fft as cf
import numpy as np
from mpi4py import MPI

import cudecomp
from cudecomp.fft import FFT

n = int(sys.argv[1])


def t(f, reps=10):
    """Return the median CUDA-event time in ms of `reps` calls."""
    f()
    cupy.cuda.get_current_stream().synchronize()
    ts = []
    for _ in range(reps):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        f()
        b.record()
        b.synchronize()
        ts.append(cupy.cuda.get_elapsed_time(a, b))
    return float(np.median(ts))


with cudecomp.Handle(MPI.COMM_WORLD) as h:
    with FFT(h, (n, n, n), (1, 1), transforms=("dct2",) * 3, dtype=np.float64) as p:
        x = p.zeros_input()
        x += 1
        out = p.empty_output()
        ours = t(lambda: p.forward(x, out))
    x = cupy.ones((n, n, n))
    peer = t(lambda: cf.dctn(x, type=2))
    with FFT(h, (n, n, n), (1, 1), kind="c2c") as p:
        z = p.zeros_input()
        o = p.empty_output()
        c2c = t(lambda: p.forward(z, o))
    with FFT(h, (n, n, n), (1, 1), kind="r2c") as p:
        r = p.zeros_input()
        o = p.empty_output()
        r2c = t(lambda: p.forward(r, o))
print(
    f"dct2 {n}^3 f64 1 GPU: plan {ours:.2f} ms, cupyx.scipy.fft.dctn {peer:.2f} ms ({peer / ours:.2f}x), "
    f"c2c FFT plan {c2c:.2f} ms ({ours / c2c:.2f}x of it), r2c plan {r2c:.2f} ms"
)
