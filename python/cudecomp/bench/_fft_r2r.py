"""``--fft-transforms`` with cosine and sine kinds: the CPU local stage against FFTW's, and a GPU plan against CuPy's.

``--fft-compare local`` with a cosine or sine kind along X: every rank transforms its
X-pencil along X with the core's transform (``rustfft``, one thread, the norm inside)
against ``scipy.fft`` (one worker), pyFFTW's ``interfaces.scipy_fft`` (FFTW, one thread,
its plan cache on) and a planned FFTW r2r (``pyfftw.FFTW`` with the kind's
``FFTW_REDFT``/``FFTW_RODFT``, ``FFTW_MEASURE``, one thread, unscaled); backward is each
one's inverse.

``--fft-compare gpu`` (the GPU variant): a ``cudecomp.fft`` plan with the transforms
(transposed output, ``--fft-norm``, the first backend of ``--backends``) on each grid,
forward and backward, against ``cupyx.scipy.fft.dctn``/``dstn`` of the whole array (one
rank, one kind on all axes, types 2 and 3 only) and against the same grid's complex
(``c2c``, of the real type's complex type) and ``r2c`` plans. Every call is synchronised
before its time is taken.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

import cudecomp

from ..fft._args import TRANSFORMS

#: FFTW's r2r kinds of the forward transforms, and of their inverses.
FFTW_KIND = {
    "dct1": ("FFTW_REDFT00", "FFTW_REDFT00"),
    "dct2": ("FFTW_REDFT10", "FFTW_REDFT01"),
    "dct3": ("FFTW_REDFT01", "FFTW_REDFT10"),
    "dct4": ("FFTW_REDFT11", "FFTW_REDFT11"),
    "dst1": ("FFTW_RODFT00", "FFTW_RODFT00"),
    "dst2": ("FFTW_RODFT10", "FFTW_RODFT01"),
    "dst3": ("FFTW_RODFT01", "FFTW_RODFT10"),
    "dst4": ("FFTW_RODFT11", "FFTW_RODFT11"),
}

Interleave = Callable[[MPI.Comm, dict[str, Any], argparse.Namespace], dict[str, float]]


def parse(text: str) -> tuple[str, str, str] | str:
    """Return the three per-axis transforms of ``--fft-transforms`` (one name for all, or three), or a usage problem."""
    names = [t.strip() for t in text.split(",")]
    if len(names) == 1:
        names *= 3
    if len(names) != 3 or any(t not in TRANSFORMS for t in names):
        return f"--fft-transforms {text!r}: expected one name or three comma-separated ones of {', '.join(TRANSFORMS)}"
    return names[0], names[1], names[2]


def local_rows(
    comm: MPI.Comm,
    shape: tuple[int, ...],
    real_dt: np.dtype,
    kind: str,
    base: dict[str, Any],
    args: argparse.Namespace,
    interleave: Interleave,
) -> list[dict[str, Any]]:
    """Rows of the cosine or sine transform ``kind`` along X of this rank's X-pencil ``shape``, forward and backward (collective)."""
    import scipy.fft as sf

    from cudecomp.fft._local import _RustLocal

    rng = np.random.default_rng(comm.rank)
    x = rng.standard_normal(shape).astype(real_dt)
    spec = x.copy()
    ours = _RustLocal(args.fft_norm, 1)
    out_f, out_b = np.empty_like(x), np.empty_like(x)
    t = int(kind[3])
    fn = getattr(sf, kind[:3])
    ifn = getattr(sf, "i" + kind[:3])
    methods: dict[str, dict[str, Any]] = {
        "forward": {
            "rustfft": (functools.partial(ours.r2r, x, 2, kind, False, out_f), None),
            "scipy": (functools.partial(fn, x, type=t, axis=2, norm=args.fft_norm, workers=1), None),
        },
        "backward": {
            "rustfft": (functools.partial(ours.r2r, spec, 2, kind, True, out_b), None),
            "scipy": (functools.partial(ifn, spec, type=t, axis=2, norm=args.fft_norm, workers=1), None),
        },
    }
    try:
        import pyfftw  # type: ignore[import-not-found,import-untyped,unused-ignore]
        import pyfftw.interfaces.scipy_fft as pf  # type: ignore[import-not-found,import-untyped,unused-ignore]

        pyfftw.interfaces.cache.enable()
        pfn, pifn = getattr(pf, kind[:3]), getattr(pf, "i" + kind[:3])
        methods["forward"]["pyfftw_scipy_fft"] = (functools.partial(pfn, x, type=t, axis=2, norm=args.fft_norm, workers=1), None)
        methods["backward"]["pyfftw_scipy_fft"] = (functools.partial(pifn, spec, type=t, axis=2, norm=args.fft_norm, workers=1), None)
        for direction, fftw_kind in zip(("forward", "backward"), FFTW_KIND[kind], strict=True):
            fi, fo = pyfftw.empty_aligned(shape, real_dt), pyfftw.empty_aligned(shape, real_dt)
            plan = pyfftw.FFTW(fi, fo, axes=(2,), direction=[fftw_kind], flags=("FFTW_MEASURE",), threads=1)
            fi[...] = x
            methods[direction]["fftw_r2r"] = (plan, None)
    except ImportError:
        pass
    rows = []
    for direction, ms in methods.items():
        med = interleave(comm, ms, args)
        rows.append(
            {
                **base,
                "kind": kind,
                "direction": direction,
                "shape": shape,
                "ms": med,
                "ratio_vs_rustfft": {k: v / med["rustfft"] for k, v in med.items()},
            }
        )
    return rows


def _synced(f: Callable[[], object]) -> Callable[[], None]:
    import cupy

    def call() -> None:
        f()
        cupy.cuda.get_current_stream().synchronize()

    return call


def gpu_rows(
    comm: MPI.Comm,
    handle: cudecomp.Handle,
    gdims: tuple[int, int, int],
    pdims: tuple[int, int],
    dname: str,
    transforms: tuple[str, str, str],
    args: argparse.Namespace,
    interleave: Interleave,
) -> list[dict[str, Any]]:
    """Rows of a GPU plan with ``transforms`` against cupyx and the complex FFT on one grid, forward and backward (collective)."""
    import cupy
    import cupyx.scipy.fft as cf

    from ..fft import FFT
    from ._common import DTYPES, NP_DTYPES

    real_dt = np.dtype(NP_DTYPES[DTYPES[dname]])
    name = args.backends.split(",")[0] if args.backends != "all" else "DIRECT"
    backend = cudecomp.TransposeCommBackend[name]
    base = {"mode": "gpu", "gdims": gdims, "pdims": pdims, "dtype": dname, "kind": ",".join(transforms)}
    if real_dt.kind != "f":
        return [{**base, "note": "skipped: --fft-compare gpu takes the real dtypes (f32, f64)"}]
    opts: dict[str, Any] = {"norm": args.fft_norm, "transposed_out": True, "backend": backend}
    plans: dict[str, Any] = {}
    try:
        plans["cudecomp"] = FFT(handle, gdims, pdims, transforms=transforms, dtype=real_dt, **opts)
        plans["c2c plan"] = FFT(handle, gdims, pdims, kind="c2c", dtype=np.result_type(real_dt, np.complex64), **opts)
        plans["r2c plan"] = FFT(handle, gdims, pdims, kind="r2c", dtype=real_dt, **opts)
    except cudecomp.CudecompError as e:
        for p in plans.values():
            p.destroy()
        return [{**base, "note": f"skipped: {e}"}]
    methods: dict[str, dict[str, Any]] = {"forward": {}, "backward": {}}
    keep = []
    for key, p in plans.items():
        a, spec = p.zeros_input(), p.empty_output()
        a += 1
        p.forward(a, spec)
        back = p.empty_input()
        keep += [a, spec, back]
        methods["forward"][key] = (_synced(functools.partial(p.forward, a, spec)), None)
        methods["backward"][key] = (_synced(functools.partial(p.backward, spec.copy(), back)), None)
    kinds = set(transforms)
    if comm.size == 1 and len(kinds) == 1 and transforms[0][3] in "23":
        t, fam = int(transforms[0][3]), transforms[0][:3]
        g = cupy.ones(gdims[::-1], real_dt)
        fn, ifn = getattr(cf, fam + "n"), getattr(cf, "i" + fam + "n")
        methods["forward"]["cupyx"] = (_synced(functools.partial(fn, g, type=t, norm=args.fft_norm)), None)
        methods["backward"]["cupyx"] = (_synced(functools.partial(ifn, g, type=t, norm=args.fft_norm)), None)
    rows = []
    for direction, ms in methods.items():
        med = interleave(comm, ms, args)
        rows.append({**base, "direction": direction, "schedule": plans["cudecomp"].schedule, "backend": backend.name, "ms": med})
    for p in plans.values():
        p.destroy()
    del keep
    return rows


def print_gpu(r: dict[str, Any]) -> None:
    """Print one ``gpu`` row: ours, then each other with other / ours."""
    g = "x".join(map(str, r["gdims"]))
    ours = r["ms"]["cudecomp"]
    parts = [f"{k} {v:.3f} ms ({v / ours:.2f}x)" for k, v in r["ms"].items() if k != "cudecomp"]
    grid = f"{r['pdims'][0]}x{r['pdims'][1]}"
    print(f"gpu   {g:<14}{grid:<7}{r['dtype']:<6}{r['kind']:<15}{r['direction']:<9}cudecomp {ours:.3f} ms, " + ", ".join(parts))


def gpu_records(r: dict[str, Any], head: list[str], tail: list[str]) -> list[tuple[str, str, float | str]]:
    """``(case, metric, value)`` of one ``gpu`` row: ``ms``, then ``<other>_ms`` and ``ratio_vs_<other>`` (ours over theirs)."""
    case = " ".join([*head, r["backend"], r["kind"], r["direction"], *tail])
    ours = r["ms"]["cudecomp"]
    out: list[tuple[str, str, float | str]] = [(case, "ms", ours)]
    for k, v in r["ms"].items():
        if k != "cudecomp":
            key = k.replace(" ", "_")
            out += [(case, f"{key}_ms", v), (case, f"ratio_vs_{key}", ours / v)]
    return out
