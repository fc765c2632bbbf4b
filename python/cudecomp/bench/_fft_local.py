"""``--fft-compare``: the CPU FFT against FFTW, its local stage and the whole distributed transform.

``local``: every rank transforms its own X-pencil of each ``--gdims`` and ``--pdims`` grid
along X at once (the batched 1-D stage that starts a forward transform and ends a
backward one): the core's transforms (``cudecomp.fft``'s ``rustfft``, one thread, with the
norm's scale, as a plan runs them) against ``pyfftw`` (FFTW, one thread, ``FFTW_MEASURE``,
out of place, unscaled), ``scipy.fft`` (one worker) and ``numpy.fft``. ``c128`` runs
c2c, ``f64`` (and ``f32``) r2c forward and c2r backward.

``pfft``: a ``cudecomp.fft`` plan (transposed output, ``--fft-norm``, the first backend
of ``--backends``, ``empty_input``/``empty_output`` arrays) against mpi4py-fft's ``PFFT``
with its FFTW backend (``backend="fftw"``, ``FFTW_MEASURE``, one thread; spectral output in
its own transposed distribution; forward unscaled and backward scaled once, as
``norm="backward"``), each on the same process grid: ``pdims = (P_rows, P_cols)`` splits
Y over ``P_rows`` and Z over ``P_cols``, which is mpi4py-fft's ``grid=(P_cols, P_rows)``
over the axes (Z, Y) of the array ``a[z, y, x]``. After the grids of ``--pdims``, a row
``best`` per side: its fastest grid of those.

Times: the methods alternate ``--fft-rounds`` times; each round times ``--reps`` calls
after ``--warmup``, every call's time the slowest rank's (a barrier before each); the
median over all rounds is reported, with ratios against ours (> 1: ours faster).
"""

from __future__ import annotations

import argparse
import functools
import json
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from mpi4py import MPI

import cudecomp

from ..fft import Kind
from . import _fft_r2r
from ._common import DTYPES, NP_DTYPES
from ._record import grid_name

_COMPLEX = {np.dtype(np.float32): np.complex64, np.dtype(np.float64): np.complex128}

Method = tuple[Callable[[], object], Callable[[], object] | None]
"""A timed call and what runs untimed before each (or None)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add this mode's options (the rest are the sweep's: --gdims, --pdims, --dtypes, --reps, ...)."""
    p.add_argument(
        "--fft-compare",
        choices=["local", "pfft", "both", "gpu"],
        default=None,
        help="instead of the sweep, compare the CPU FFT with FFTW: local = each rank's batched FFT along X "
        "(rustfft vs pyfftw FFTW_MEASURE vs scipy vs numpy), pfft = the whole distributed transform vs mpi4py-fft's "
        "PFFT with backend='fftw' on the same process grids; gpu = a GPU plan vs cupyx.scipy.fft and the complex "
        "FFT plan (default: off)",
    )
    p.add_argument(
        "--fft-transforms",
        default="fft",
        help="--fft-compare: the per-axis transforms (X,Y,Z), one name for all three or three comma-separated of fft, "
        "dct1..dct4, dst1..dst4; a cosine or sine kind along X makes local compare it with FFTW's r2r, pfft runs "
        "PFFT with FFTW's r2r along those axes (default: fft)",
    )
    p.add_argument("--fft-rounds", type=int, default=3, help="--fft-compare: rounds the methods alternate (default: 3)")


def _samples(comm: MPI.Comm, fn: Callable[[], object], warmup: int, reps: int, before: Callable[[], object] | None = None) -> list[float]:
    """Slowest rank's milliseconds of each of ``reps`` calls after ``warmup`` (``before`` runs untimed before each)."""
    for _ in range(warmup):
        if before:
            before()
        fn()
    out = []
    for _ in range(reps):
        if before:
            before()
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        out.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX) * 1e3)
    return out


def _interleaved(comm: MPI.Comm, methods: Mapping[str, Method], args: argparse.Namespace) -> dict[str, float]:
    """Median milliseconds per method, the methods alternating round after round."""
    acc: dict[str, list[float]] = {k: [] for k in methods}
    for _ in range(max(1, args.fft_rounds)):
        for k, (fn, before) in methods.items():
            acc[k] += _samples(comm, fn, args.warmup, args.reps, before)
    return {k: float(np.median(v)) for k, v in acc.items()}


def _local_rows(
    comm: MPI.Comm, handle: cudecomp.Handle, gdims: tuple[int, int, int], pdims: tuple[int, int], dname: str, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Rows of the local stage on this grid's X-pencils, forward and backward (collective)."""
    from cudecomp.fft._local import _NumpyLocal, _RustLocal, _ScipyLocal

    real_dt = np.dtype(NP_DTYPES[DTYPES[dname]])
    r2c = real_dt.kind == "f"
    cdt = np.dtype(_COMPLEX[real_dt]) if r2c else real_dt
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = gdims, pdims
    grid = handle.create_grid(cfg)
    shape = tuple(grid.get_pencil_info(0).array_shape)
    grid.destroy()
    kind_x = _transforms(args)[0]
    if kind_x != "fft":
        if not r2c:
            return [{"mode": "local", "gdims": gdims, "pdims": pdims, "dtype": dname, "note": f"skipped: {kind_x} takes f32 or f64"}]
        base = {"mode": "local", "gdims": gdims, "pdims": pdims, "dtype": dname}
        return _fft_r2r.local_rows(comm, shape, real_dt, kind_x, base, args, _interleaved)
    n = shape[-1]
    sshape = (*shape[:-1], n // 2 + 1) if r2c else shape
    rng = np.random.default_rng(comm.rank)
    x = rng.standard_normal(shape).astype(real_dt)
    if not r2c:
        x = (x + 1j * rng.standard_normal(shape)).astype(cdt)
    spec = np.fft.rfft(x, axis=-1).astype(cdt) if r2c else np.fft.fft(x, axis=-1).astype(cdt)
    libs: dict[str, Any] = {"rustfft": _RustLocal(args.fft_norm, 1), "numpy": _NumpyLocal(args.fft_norm)}
    try:
        libs["scipy"] = _ScipyLocal(args.fft_norm, 1)
    except ImportError:
        pass
    out_f, out_b = np.empty(sshape, cdt), np.empty(shape, x.dtype)
    # FFTW's c2r destroys its input, which is refilled before each of its calls: every other
    # backward call gets its input read just before it too, so that all start from the
    # same cache state.
    touched = np.empty_like(spec)
    touch = functools.partial(np.copyto, touched, spec)
    methods: dict[str, dict[str, Method]] = {"forward": {}, "backward": {}}
    for name, L in libs.items():
        if r2c:
            methods["forward"][name] = (functools.partial(L.r2c, x, (2,), out_f), None)
            methods["backward"][name] = (functools.partial(L.c2r, spec, (2,), (n,), out_b), touch)
        else:
            methods["forward"][name] = (functools.partial(L.c2c, x, (2,), False, out_f), None)
            methods["backward"][name] = (functools.partial(L.c2c, spec, (2,), True, out_b), touch)
    try:
        import pyfftw  # type: ignore[import-not-found,import-untyped,unused-ignore]

        fi, fo = pyfftw.empty_aligned(shape, x.dtype), pyfftw.empty_aligned(sshape, cdt)
        bi, bo = pyfftw.empty_aligned(sshape, cdt), pyfftw.empty_aligned(shape, x.dtype)
        fwd = pyfftw.FFTW(fi, fo, axes=(2,), direction="FFTW_FORWARD", flags=("FFTW_MEASURE",), threads=1)
        bwd = pyfftw.FFTW(bi, bo, axes=(2,), direction="FFTW_BACKWARD", flags=("FFTW_MEASURE",), threads=1)
        fi[...] = x

        def refill() -> None:  # FFTW's c2r destroys its input (c2c, out of place, is refilled alike)
            bi[...] = spec

        methods["forward"]["pyfftw"] = (functools.partial(fwd, normalise_idft=False), None)
        methods["backward"]["pyfftw"] = (functools.partial(bwd, normalise_idft=False), refill)
    except ImportError:
        pass
    rows = []
    for direction, ms in methods.items():
        med = _interleaved(comm, ms, args)
        rows.append(
            {
                "mode": "local",
                "gdims": gdims,
                "pdims": pdims,
                "dtype": dname,
                "kind": ("r2c" if direction == "forward" else "c2r") if r2c else "c2c",
                "direction": direction,
                "shape": shape,
                "ms": med,
                "ratio_vs_rustfft": {k: v / med["rustfft"] for k, v in med.items()},
            }
        )
    return rows


def _pfft_grid(
    comm: MPI.Comm, handle: cudecomp.Handle, gdims: tuple[int, int, int], pdims: tuple[int, int], dname: str, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Rows of cudecomp.fft against mpi4py-fft's PFFT (FFTW) on one process grid, forward and backward (collective)."""
    from mpi4py_fft import PFFT, newDistArray  # type: ignore[import-not-found,import-untyped,unused-ignore]

    from cudecomp.fft import FFT

    real_dt = np.dtype(NP_DTYPES[DTYPES[dname]])
    transforms = _transforms(args)
    r2r = [g for g in range(3) if transforms[g] != "fft"]
    kind: Kind = ("r2r" if transforms[0] != "fft" else "r2c") if real_dt.kind == "f" else "c2c"
    name = args.backends.split(",")[0] if args.backends != "all" else "DIRECT"
    backend = cudecomp.TransposeCommBackend[name]
    rng = np.random.default_rng(comm.rank)
    base = {"mode": "pfft", "gdims": gdims, "pdims": pdims, "dtype": dname}
    if r2r and kind == "c2c":
        return [{**base, "note": "skipped: cosine and sine transforms take f32 or f64"}]
    if r2r and "fft" in transforms:
        # PFFT transforms X first (its axes' last), and its r2r transforms take real data only.
        return [{**base, "note": "skipped: mpi4py-fft's PFFT takes cosine and sine axes with FFT axes only where no FFT comes first"}]

    def fill(v: Any) -> None:
        v[...] = rng.standard_normal(v.shape) if kind != "c2c" else rng.standard_normal(v.shape) + 1j * rng.standard_normal(v.shape)

    try:
        plan = FFT(
            handle, gdims, pdims, kind=kind, dtype=real_dt, norm=args.fft_norm, transposed_out=True, backend=backend, transforms=transforms
        )
    except cudecomp.CudecompError as e:
        return [{**base, "note": f"skipped: {e}"}]
    a, spec, back = plan.empty_input(), plan.empty_output(), plan.empty_input()
    fill(a)
    with warnings.catch_warnings():  # mpi4py-fft plans on uninitialised arrays (NumPy warns of NaNs)
        warnings.simplefilter("ignore", RuntimeWarning)
        pf = PFFT(comm, gdims[::-1], dtype=real_dt, grid=(pdims[1], pdims[0]), backend="fftw", **_pfft_axes(transforms))
    u, uh, ub = newDistArray(pf, False), newDistArray(pf, True), newDistArray(pf, False)
    fill(u)
    norm_b = args.fft_norm == "backward"
    pf.forward(u, uh, normalize=False)
    uh_in = uh.copy()
    plan.forward(a, spec)
    spec_in = spec.copy()

    def restore() -> None:  # FFTW's c2r may destroy its input
        uh[...] = uh_in

    methods: dict[str, Method] = {
        "cudecomp forward": (functools.partial(plan.forward, a, spec), None),
        "mpi4py-fft forward": (functools.partial(pf.forward, u, uh, normalize=not norm_b), None),
        "cudecomp backward": (functools.partial(plan.backward, spec_in, back), None),
        "mpi4py-fft backward": (functools.partial(pf.backward, uh, ub, normalize=norm_b), restore),
    }
    med = _interleaved(comm, methods, args)
    rows = []
    for d in ("forward", "backward"):
        ours, theirs = med[f"cudecomp {d}"], med[f"mpi4py-fft {d}"]
        rows.append(
            {
                **base,
                "kind": ",".join(transforms) if r2r else kind,
                "direction": d,
                "schedule": plan.schedule,
                "backend": backend.name,
                "ms": {"cudecomp": ours, "mpi4py-fft": theirs},
                "speedup": theirs / ours,
            }
        )
    plan.destroy()
    pf.destroy()
    return rows


def _transforms(args: argparse.Namespace) -> tuple[str, str, str]:
    """Return the per-axis transforms of ``--fft-transforms`` (checked before measuring)."""
    t = _fft_r2r.parse(args.fft_transforms)
    assert not isinstance(t, str), t
    return t


def _pfft_axes(transforms: tuple[str, str, str]) -> dict[str, Any]:
    """PFFT's ``axes`` and ``transforms`` of our per-axis ``transforms`` (its array is ``a[z, y, x]``).

    With cosine or sine axes each axis is a stage of its own, keyed as mpi4py-fft keys its
    serial transforms, with FFTW's r2r of the kind (``mpi4py_fft.fftw``'s ``dctn``/``dstn``).
    """
    if all(t == "fft" for t in transforms):
        return {"axes": (0, 1, 2)}
    from mpi4py_fft import fftw  # type: ignore[import-not-found,import-untyped,unused-ignore]

    table = {}
    for g, t in enumerate(transforms):
        if t != "fft":
            fam, typ = t[:3], int(t[3])
            table[(2 - g,)] = (
                functools.partial(getattr(fftw, fam + "n"), type=typ),
                functools.partial(getattr(fftw, "i" + fam + "n"), type=typ),
            )
    return {"axes": ((0,), (1,), (2,)), "transforms": table}


def _pfft_rows(
    comm: MPI.Comm, handle: cudecomp.Handle, gdims: tuple[int, int, int], grids: list[tuple[int, int]], dname: str, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Rows of every grid, then each side's best grid of those (collective)."""
    try:
        import mpi4py_fft  # noqa: F401
    except ImportError:
        return [{"mode": "pfft", "gdims": gdims, "dtype": dname, "note": "skipped: mpi4py-fft is not installed"}]
    rows: list[dict[str, Any]] = []
    for pdims in grids:
        rows += _pfft_grid(comm, handle, gdims, pdims, dname, args)
    for d in ("forward", "backward"):
        mine = [r for r in rows if r.get("direction") == d]
        if mine:
            bo = min(mine, key=lambda r: r["ms"]["cudecomp"])
            bt = min(mine, key=lambda r: r["ms"]["mpi4py-fft"])
            ours, theirs = bo["ms"]["cudecomp"], bt["ms"]["mpi4py-fft"]
            rows.append(
                {
                    "mode": "pfft",
                    "gdims": gdims,
                    "pdims": "best",
                    "best_pdims": {"cudecomp": bo["pdims"], "mpi4py-fft": bt["pdims"]},
                    "dtype": dname,
                    "kind": bo["kind"],
                    "direction": d,
                    "ms": {"cudecomp": ours, "mpi4py-fft": theirs},
                    "speedup": theirs / ours,
                }
            )
    return rows


def _fmt_grid(p: Any) -> str:
    return p if isinstance(p, str) else f"{p[0]}x{p[1]}"


def _print(rows: list[dict[str, Any]], comm: MPI.Comm) -> None:
    print(f"# --fft-compare, {comm.size} ranks; ms = median of the slowest rank's time per call; x = other/ours (> 1: ours faster)")
    for r in rows:
        g = "x".join(map(str, r["gdims"]))
        if "note" in r:
            print(f"{r['mode']:<6}{g:<14}{_fmt_grid(r.get('pdims', '-')):<7}{r['dtype']:<6}{r['note']}")
            continue
        if r["mode"] == "gpu":
            _fft_r2r.print_gpu(r)
        elif r["mode"] == "local":
            parts = [f"{k} {v:.3f}" + ("" if k == "rustfft" else f" ({r['ratio_vs_rustfft'][k]:.2f}x)") for k, v in r["ms"].items()]
            kind = r["kind"] + ("" if r["kind"] != "c2c" else "+" if r["direction"] == "forward" else "-")
            shape = "x".join(map(str, r["shape"]))
            print(f"local {g:<14}{_fmt_grid(r['pdims']):<7}{r['dtype']:<6}{kind:<5}{shape:<13}" + ", ".join(parts))
        else:
            if r["pdims"] == "best":
                extra = f" (grids: ours {_fmt_grid(r['best_pdims']['cudecomp'])}, theirs {_fmt_grid(r['best_pdims']['mpi4py-fft'])})"
            else:
                extra = f" ({r['schedule']}, {r['backend']})"
            print(
                f"pfft  {g:<14}{_fmt_grid(r['pdims']):<7}{r['dtype']:<6}{r['kind']:<5}{r['direction']:<9}"
                f"cudecomp {r['ms']['cudecomp']:.2f} ms, mpi4py-fft(fftw) {r['ms']['mpi4py-fft']:.2f} ms: {r['speedup']:.2f}x{extra}"
            )


def records(rows: list[dict[str, Any]], ranks: int, env: Mapping[str, str]) -> list[tuple[str, str, float | str]]:
    """``(case, metric, value)`` of the comparison's rows, as ``--record`` writes them.

    Cases: ``fft-local GRID DTYPE PDIMS KIND DIRECTION`` (``ms``: the core's transform;
    ``<library>_ms`` and ``ratio_vs_<library>``, ours over theirs, for pyfftw, scipy and
    numpy) and ``fft-pfft GRID DTYPE PDIMS BACKEND KIND DIRECTION`` (``ms``:
    ``cudecomp.fft``; ``mpi4py_fft_pfft_fftw_ms`` and its ratio; PDIMS ``best-of-N``, without
    a backend, compares each side's fastest grid of ``N`` ranks and names them under
    ``grids``), then the library's settings. Skipped rows give none.
    """
    tail = [f"{k}={v}" for k, v in env.items()]
    out: list[tuple[str, str, float | str]] = []
    for r in rows:
        if "note" in r:
            continue
        grid = f"best-of-{ranks}" if r.get("pdims") == "best" else _fmt_grid(r["pdims"])
        head = [f"fft-{r['mode']}", grid_name(r["gdims"]), r["dtype"], grid]
        if r["mode"] == "gpu":
            out += _fft_r2r.gpu_records(r, head, tail)
            continue
        if r["mode"] == "local":
            case = " ".join([*head, r["kind"], r["direction"], *tail])
            ours = r["ms"]["rustfft"]
            out.append((case, "ms", ours))
            for lib, v in r["ms"].items():
                if lib != "rustfft":
                    out += [(case, f"{lib}_ms", v), (case, f"ratio_vs_{lib}", ours / v)]
            continue
        backend = r.get("backend", "")
        case = " ".join([*head, *([backend] if backend else []), r["kind"], r["direction"], *tail])
        ours, theirs = r["ms"]["cudecomp"], r["ms"]["mpi4py-fft"]
        out += [(case, "ms", ours), (case, "mpi4py_fft_pfft_fftw_ms", theirs), (case, "ratio_vs_mpi4py_fft_pfft_fftw", ours / theirs)]
        if r["pdims"] == "best":
            grids = r["best_pdims"]
            out.append((case, "grids", f"ours {_fmt_grid(grids['cudecomp'])}, theirs {_fmt_grid(grids['mpi4py-fft'])}"))
    return out


def main(args: argparse.Namespace, grids: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """Run the comparison (collective); rank 0 prints it and writes ``--json``; every rank returns the rows."""
    comm = MPI.COMM_WORLD
    gpu = args.fft_compare == "gpu"
    if gpu == cudecomp.CPU_ONLY:
        raise SystemExit(f"--fft-compare {args.fft_compare} needs the {'GPU' if gpu else 'CPU'} variant")
    rows: list[dict[str, Any]] = []
    with cudecomp.Handle(comm) as handle:
        for gdims in args.gdims:
            for dname in args.dtypes:
                if gpu:
                    for pdims in grids:
                        rows += _fft_r2r.gpu_rows(comm, handle, gdims, pdims, dname, _transforms(args), args, _interleaved)
                if args.fft_compare in ("local", "both"):
                    for pdims in grids:
                        rows += _local_rows(comm, handle, gdims, pdims, dname, args)
                if args.fft_compare in ("pfft", "both"):
                    rows += _pfft_rows(comm, handle, gdims, grids, dname, args)
    if comm.rank == 0:
        _print(rows, comm)
        if args.json:
            meta = {"ranks": comm.size, "cudecomp": cudecomp.__version__, "time": time.strftime("%Y-%m-%d %H:%M:%S")}
            with open(args.json, "w") as f:
                json.dump({"meta": meta, "rows": rows}, f, indent=1, default=lambda o: list(o) if isinstance(o, tuple) else str(o))
    return rows
