"""Probe: the core's DCT-II along each axis of an n^3 array against scipy.fft and pyFFTW (one thread)."""

import sys
import time

import numpy as np
import scipy.fft as sf

from cudecomp import _cudecomp

n = int(sys.argv[1])
kind = sys.argv[2] if len(sys.argv) > 2 else "dct2"
a = np.random.default_rng(0).standard_normal((n, n, n))


def med(f, reps=5):
    """Return the median time in ms of `reps` calls."""
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return 1e3 * sorted(ts)[len(ts) // 2]


res = {}
b = a.copy()
res["ours_3axes"] = med(lambda: [_cudecomp._local_r2r(kind, b, ax, False, "backward", 1) for ax in (0, 1, 2)])
res["scipy_3axes"] = med(
    lambda: sf.dctn(a, type=int(kind[3]), workers=1) if kind.startswith("dct") else sf.dstn(a, type=int(kind[3]), workers=1)
)
try:
    import pyfftw
    import pyfftw.interfaces.scipy_fft as pf

    pyfftw.interfaces.cache.enable()
    f = pf.dctn if kind.startswith("dct") else pf.dstn
    f(a, type=int(kind[3]), workers=1)
    res["pyfftw_3axes"] = med(lambda: f(a, type=int(kind[3]), workers=1))
    # a planned FFTW r2r (REDFT10 = DCT-II) over the 3 axes, in place: the peer at its best
    kd = {
        "dct1": "FFTW_REDFT00",
        "dct2": "FFTW_REDFT10",
        "dct3": "FFTW_REDFT01",
        "dct4": "FFTW_REDFT11",
        "dst1": "FFTW_RODFT00",
        "dst2": "FFTW_RODFT10",
        "dst3": "FFTW_RODFT01",
        "dst4": "FFTW_RODFT11",
    }[kind]
    x = pyfftw.empty_aligned((n, n, n), dtype="float64")
    y = pyfftw.empty_aligned((n, n, n), dtype="float64")
    plan = pyfftw.FFTW(x, y, axes=(0, 1, 2), direction=[kd] * 3, flags=("FFTW_MEASURE",), threads=1)
    x[...] = a
    res["fftw_planned_3axes"] = med(lambda: plan())
except Exception as e:
    res["pyfftw"] = repr(e)
print(n, kind, " ".join(f"{k}={v:.1f}ms" if isinstance(v, float) else f"{k}={v}" for k, v in res.items()))
