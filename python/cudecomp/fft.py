"""Distributed 3-D FFTs over cudecomp grid descriptors.

[`FFT`][cudecomp.fft.FFT] is a plan: it owns the grid descriptor(s) of one global grid and
process grid, and runs forward and backward complex-to-complex (``c2c``) or
real-to-complex / complex-to-real (``r2c``) transforms of this rank's pencils, local
one-, two- or three-dimensional FFTs along contiguous axes with the global transposes in
between. The CPU variant transforms NumPy arrays with ``scipy.fft`` (worker threads) when
SciPy is installed, else with ``numpy.fft``; the GPU variant transforms CuPy arrays with
cuFFT through CuPy (plans cached by CuPy's plan cache), on the operation's stream, with no
host synchronisation.

Real space is always the X-pencil (array ``a[z, y, x]``, X contiguous). Spectral space is
the same X-pencil of the spectral grid (the default), or, with ``transposed_out=True``,
the Z-pencil where the forward transform ends, which saves the return transposes. Which
schedule runs depends on the process grid ``(P_rows, P_cols)``:

| schedule | when | forward |
| --- | --- | --- |
| ``local`` | one rank | one 3-D FFT, no transpose |
| ``slab-xy`` | ``P_rows == 1`` | 2-D FFT over (Y, X), Y→Z, 1-D FFT along Z |
| ``slab-yz`` | ``P_cols == 1`` | 1-D FFT along X, X→Y, 2-D FFT over (Z, Y) |
| ``pencil`` | otherwise | FFT along X, X→Y, FFT along Y, Y→Z, FFT along Z |

On GPUs, ``slab-xy`` on ``DIRECT`` streams its slabs: the 2-D FFTs run in slabs of Z
planes (backward: the FFTs along Z in slabs of Y rows), each sent to the peers by the copy
engine while the next is transformed (pencils keep X fastest; a transposed output is then
indexed ``a[kz, ky, kx]``).

Example (any number of ranks):

```python
with cudecomp.Handle(MPI.COMM_WORLD) as handle, cudecomp.fft.FFT(handle, (64, 64, 64), kind="r2c") as plan:
    x, y, z = plan.coordinates()          # this rank's grid points on [0, 2 pi)^3
    u = np.sin(x) * np.cos(y) * np.cos(z) # float64, this rank's X-pencil
    u_hat = plan.forward(u)               # complex128, this rank's spectral pencil
    kx, ky, kz = plan.wavenumbers()       # broadcastable against u_hat
    du_dx = plan.backward(1j * kx * u_hat)
```
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Literal

import numpy as np

from ._alloc import numpy_dtype
from ._config import GridDescConfig, _check_elements
from ._cudecomp import CPU_ONLY, GridDesc, Handle, PencilInfo
from ._enums import DataType, TransposeCommBackend
from ._errors import InvalidUsageError, NotSupportedError

__all__ = ["FFT", "Kind", "Norm", "Schedule", "schedule_of"]

Kind = Literal["c2c", "r2c"]
"""Transform kind: ``"c2c"`` (complex to complex) or ``"r2c"`` (real to complex; backward is complex to real)."""

Norm = Literal["backward", "ortho", "forward"]
"""Normalisation as in ``numpy.fft``: which direction is scaled by ``1/N`` (``"ortho"``: both by ``1/sqrt(N)``)."""

Schedule = Literal["local", "slab-xy", "slab-yz", "pencil"]
"""Which sequence of local FFTs and transposes runs (see the module documentation)."""

_NORMS = ("backward", "ortho", "forward")
_KINDS = ("c2c", "r2c")
_REAL = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}
_COMPLEX = {v: k for k, v in _REAL.items()}

# Memory order (global axes, fastest first) of the X-, Y- and Z-pencils per schedule. Every
# pencil an FFT runs on has its transformed axes fastest; pencils that hold the same data
# (X and Y with P_rows == 1, Y and Z with P_cols == 1) share one layout, so that the
# array of one is passed as the other and no local transpose runs.
_MEM_ORDER: dict[str, tuple[tuple[int, int, int], ...]] = {
    "local": ((0, 1, 2), (0, 1, 2), (0, 1, 2)),
    "slab-xy": ((0, 1, 2), (0, 1, 2), (2, 0, 1)),
    "slab-yz": ((0, 1, 2), (1, 2, 0), (1, 2, 0)),
    "pencil": ((0, 1, 2), (1, 2, 0), (2, 0, 1)),
}


# The slab-xy schedule on GPUs with DIRECT streams its 2-D FFTs into the exchange (see
# `_SlabStream`): every pencil keeps X fastest, so each rank's chunk for a peer is whole
# (Y, X) planes the copy engine moves without any SM, beside the FFT of the next slab.
_STREAMED_ORDER = ((0, 1, 2), (0, 1, 2), (0, 1, 2))

# Slabs the 2-D FFTs of a streamed forward transform are cut into (the exchange of one
# overlaps the FFT of the next); `CUDECOMP_FFT_CHUNKS` overrides.
_STREAM_CHUNKS = 8


def _streams_slabs(cfg: GridDescConfig, own_gpus: Callable[[], bool]) -> bool:
    """Whether a plan on grid configuration ``cfg`` streams its slabs.

    GPU variant, slab-xy, DIRECT, and each rank on a GPU of its own (``own_gpus``, asked
    last: collective) unless ``CUDECOMP_FFT_STREAM=1`` asks for it anyway; ``0`` turns it
    off. Ranks sharing a GPU gain nothing from it (the copy engine and SMs are the same
    ones) and were measured slower with it.
    """
    pr, pc = (int(v) for v in cfg.pdims)
    backend = TransposeCommBackend(int(cfg.transpose_comm_backend))
    setting = os.environ.get("CUDECOMP_FFT_STREAM", "").strip()
    if setting == "0" or CPU_ONLY or pr != 1 or pc < 2 or backend != TransposeCommBackend.DIRECT:
        return False
    return setting == "1" or own_gpus()


def schedule_of(pdims: Sequence[int]) -> Schedule:
    """Return the schedule an FFT runs on the process grid ``pdims = (P_rows, P_cols)``.

    ``local`` on one rank, ``slab-xy`` when ``P_rows == 1``, ``slab-yz`` when
    ``P_cols == 1``, ``pencil`` otherwise.
    """
    pr, pc = int(pdims[0]), int(pdims[1])
    if pr == 1 and pc == 1:
        return "local"
    if pr == 1:
        return "slab-xy"
    if pc == 1:
        return "slab-yz"
    return "pencil"


def _usable(gdims: Sequence[int], spectral_x: int, pdims: Sequence[int]) -> bool:
    """Whether every pencil the schedule touches is non-empty on every rank."""
    y, z = int(gdims[1]), int(gdims[2])
    pr, pc = int(pdims[0]), int(pdims[1])
    s = schedule_of(pdims)
    if s == "local":
        return True
    if s == "slab-xy":
        return z >= pc and y >= pc
    if s == "slab-yz":
        return y >= pr and spectral_x >= pr
    return y >= pr and z >= pc and spectral_x >= pr and y >= pc


def _ints(name: str, value: Any, n: int, expected: str = "") -> tuple[int, ...]:
    """Return ``value`` as ``n`` integers, checked as configuration fields are.

    ``TypeError`` naming ``name`` for floats, bools, strings or non-sequences,
    ``InvalidUsageError`` for another length.
    """
    expected = expected or f"a sequence of {n} integers"
    try:
        arr = _check_elements(name, value, "int")
    except TypeError:
        raise TypeError(f"{name}: expected {expected}, got {value!r}") from None
    if arr.shape != (n,):
        raise InvalidUsageError(f"{name} {value!r}: expected {expected}")
    return tuple(int(v) for v in arr)


def _lengths(lengths: Any) -> list[float]:
    """Return box lengths (X, Y, Z) from one or three positive finite numbers."""
    bad = f"lengths: expected one or three positive finite box lengths, got {lengths!r}"
    try:
        if isinstance(lengths, str | bytes):
            raise TypeError(bad)
        ls = [float(lengths)] * 3 if isinstance(lengths, int | float) else [float(v) for v in lengths]
    except (TypeError, ValueError):
        raise TypeError(bad) from None
    if len(ls) != 3 or not all(math.isfinite(v) and v > 0 for v in ls):
        raise InvalidUsageError(bad)
    return ls


def _backend_list(backend: Any) -> list[TransposeCommBackend | None]:
    """Return the plan's candidate backends: ``[None]`` (the configuration's), one, or several to time."""
    if backend is None:
        return [None]
    if isinstance(backend, TransposeCommBackend):
        return [backend]
    bad = TypeError(f"backend: expected a TransposeCommBackend member, a non-empty list of them, or None, got {backend!r}")
    if isinstance(backend, str | bytes):
        raise bad
    try:
        backends = list(backend)
    except TypeError:
        raise bad from None
    if not backends or not all(isinstance(b, TransposeCommBackend) for b in backends):
        raise bad
    return backends


def _factor_pairs(n: int) -> list[tuple[int, int]]:
    return [(r, n // r) for r in range(1, n + 1) if n % r == 0]


# ---------------------------------------------------------------------------------------
# Local transforms


class _Local:
    """Local FFTs of one library.

    Stages are c2c over ``axes``, r2c and c2r (the last of ``axes`` is the halved one).
    With ``out`` the result is written into ``out`` (and ``out`` returned); without it
    the result is a new array, or the input itself when ``overwrite`` allows.
    """

    name = ""
    gpu = False

    def __init__(self, norm: str) -> None:
        self.norm = norm

    def c2c(self, a: Any, axes: tuple[int, ...], inverse: bool, out: Any = None, overwrite: bool = False) -> Any:
        raise NotImplementedError

    def r2c(self, a: Any, axes: tuple[int, ...], out: Any = None) -> Any:
        raise NotImplementedError

    def c2r(self, a: Any, axes: tuple[int, ...], s: tuple[int, ...], out: Any = None, overwrite: bool = False) -> Any:
        raise NotImplementedError

    def scale(self, inverse: bool, n: int) -> float:
        """Factor to apply once after all stages (1 when the stages normalise themselves)."""
        return 1.0


def _into(r: Any, out: Any) -> Any:
    """Deliver ``r`` in ``out`` when given (copying unless it already is ``out``)."""
    if out is None or r is out:
        return r
    out[...] = r
    return out


class _NumpyLocal(_Local):
    """``numpy.fft``: each stage applies the norm itself (pocketfft scales for free).

    NumPy >= 2 writes into ``out`` directly (in place too); NumPy < 2 computes in double
    precision, so results are cast back to the plan's precision.
    """

    name = "numpy"

    def __init__(self, norm: str) -> None:
        super().__init__(norm)
        self.has_out = "out" in inspect.signature(np.fft.fft).parameters  # NumPy >= 2.0

    def _run(self, f: Any, a: Any, out: Any, overwrite: bool, dtype: np.dtype, **kw: Any) -> Any:
        if self.has_out and (out is not None or overwrite):
            return f(a, norm=self.norm, out=a if out is None else out, **kw)
        return _into(f(a, norm=self.norm, **kw).astype(dtype, copy=False), out)

    def c2c(self, a: Any, axes: tuple[int, ...], inverse: bool, out: Any = None, overwrite: bool = False) -> Any:
        if len(axes) == 1:
            return self._run(np.fft.ifft if inverse else np.fft.fft, a, out, overwrite, a.dtype, axis=axes[0])
        return self._run(np.fft.ifftn if inverse else np.fft.fftn, a, out, overwrite, a.dtype, axes=axes)

    def r2c(self, a: Any, axes: tuple[int, ...], out: Any = None) -> Any:
        if len(axes) == 1:
            return self._run(np.fft.rfft, a, out, False, _COMPLEX[a.dtype], axis=axes[0])
        return self._run(np.fft.rfftn, a, out, False, _COMPLEX[a.dtype], axes=axes)

    def c2r(self, a: Any, axes: tuple[int, ...], s: tuple[int, ...], out: Any = None, overwrite: bool = False) -> Any:
        if len(axes) == 1:
            return self._run(np.fft.irfft, a, out, False, _REAL[a.dtype], n=s[0], axis=axes[0])
        return self._run(np.fft.irfftn, a, out, False, _REAL[a.dtype], s=s, axes=axes)


class _ScipyLocal(_Local):
    """``scipy.fft`` with worker threads; each stage applies the norm itself.

    ``scipy.fft`` has no ``out``: a c2c stage into ``out`` copies its input there and
    transforms it in place; r2c and c2r stages copy their result.
    """

    name = "scipy"

    def __init__(self, norm: str, workers: int | None) -> None:
        super().__init__(norm)
        import scipy.fft

        self.m = scipy.fft
        self.workers = workers

    def c2c(self, a: Any, axes: tuple[int, ...], inverse: bool, out: Any = None, overwrite: bool = False) -> Any:
        if out is not None and out is not a:
            np.copyto(out, a)
            a, overwrite = out, True
        kw = {"norm": self.norm, "overwrite_x": overwrite, "workers": self.workers}
        if len(axes) == 1:
            r = (self.m.ifft if inverse else self.m.fft)(a, axis=axes[0], **kw)
        else:
            r = (self.m.ifftn if inverse else self.m.fftn)(a, axes=axes, **kw)
        return _into(r, out)

    def r2c(self, a: Any, axes: tuple[int, ...], out: Any = None) -> Any:
        kw = {"norm": self.norm, "workers": self.workers}
        r = self.m.rfft(a, axis=axes[0], **kw) if len(axes) == 1 else self.m.rfftn(a, axes=axes, **kw)
        return _into(r, out)

    def c2r(self, a: Any, axes: tuple[int, ...], s: tuple[int, ...], out: Any = None, overwrite: bool = False) -> Any:
        kw = {"norm": self.norm, "overwrite_x": overwrite, "workers": self.workers}
        r = self.m.irfft(a, n=s[0], axis=axes[0], **kw) if len(axes) == 1 else self.m.irfftn(a, s=s, axes=axes, **kw)
        return _into(r, out)


class _CupyLocal(_Local):
    """cuFFT through ``cupyx.scipy.fft``, on CuPy's current stream.

    CuPy caches the cuFFT plans (``cupy.fft.config.get_plan_cache()``, 16 plans per device
    by default) and scales with a separate kernel, so the stages run unscaled and the
    plan scales once, in place, after the last one. Results are new arrays from CuPy's
    memory pool (on the current stream), or the input transformed in place.
    """

    name = "cupy"
    gpu = True

    def __init__(self, norm: str) -> None:
        super().__init__(norm)
        import cupyx.scipy.fft

        self.m = cupyx.scipy.fft

    def c2c(self, a: Any, axes: tuple[int, ...], inverse: bool, out: Any = None, overwrite: bool = False) -> Any:
        # "backward" leaves the forward unscaled, "forward" the inverse.
        norm = "forward" if inverse else "backward"
        if len(axes) == 1:
            r = (self.m.ifft if inverse else self.m.fft)(a, axis=axes[0], norm=norm, overwrite_x=overwrite)
        else:
            r = (self.m.ifftn if inverse else self.m.fftn)(a, axes=axes, norm=norm, overwrite_x=overwrite)
        return _into(r, out)

    def r2c(self, a: Any, axes: tuple[int, ...], out: Any = None) -> Any:
        r = self.m.rfft(a, axis=axes[0], norm="backward") if len(axes) == 1 else self.m.rfftn(a, axes=axes, norm="backward")
        return _into(r, out)

    def c2r(self, a: Any, axes: tuple[int, ...], s: tuple[int, ...], out: Any = None, overwrite: bool = False) -> Any:
        if len(axes) == 1:
            r = self.m.irfft(a, n=s[0], axis=axes[0], norm="forward", overwrite_x=overwrite)
        else:
            r = self.m.irfftn(a, s=s, axes=axes, norm="forward", overwrite_x=overwrite)
        return _into(r, out)

    def scale(self, inverse: bool, n: int) -> float:
        if self.norm == "ortho":
            return 1.0 / math.sqrt(n)
        if (self.norm == "backward") == inverse:
            return 1.0 / n
        return 1.0


def _make_local(library: str, norm: str, workers: int | None) -> _Local:
    if not CPU_ONLY:
        if library not in ("auto", "cupy"):
            raise InvalidUsageError(f"fft_library {library!r}: the GPU variant transforms with cupy")
        return _CupyLocal(norm)
    if library == "cupy":
        raise InvalidUsageError("fft_library 'cupy' needs the GPU variant")
    if library in ("auto", "scipy"):
        try:
            return _ScipyLocal(norm, workers)
        except ImportError:
            if library == "scipy":
                raise
    if library not in ("auto", "numpy", "scipy"):
        raise InvalidUsageError(f"fft_library {library!r}: expected 'auto', 'numpy', 'scipy' or 'cupy'")
    return _NumpyLocal(norm)


# ---------------------------------------------------------------------------------------
# Streams (GPU variant)


def _stream_ptr(stream: Any) -> int:
    """Return the raw handle of a stream given as None (CuPy's current), an int, ``__cuda_stream__`` or ``.ptr``."""
    if stream is None:
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    if isinstance(stream, bool):
        raise TypeError(f"stream: expected None, an int handle or a stream object, got {stream!r}")
    if isinstance(stream, int):
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int((proto() if callable(proto) else proto)[1])
    ptr = getattr(stream, "ptr", None)
    if isinstance(ptr, int) and not isinstance(ptr, bool):
        return ptr
    raise TypeError(f"stream: expected None, an int handle or a stream object, got {stream!r}")


class _StreamRef:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)


# ---------------------------------------------------------------------------------------
# Streamed slabs (GPU, slab-xy, DIRECT)


class _SlabStream:
    """The slab-xy transforms of a GPU plan on DIRECT, each local FFT streamed into the exchange beside it.

    Forward: the 2-D FFTs over (Y, X) run in slabs of Z planes on the operation's stream
    into a library array, each slab followed by an event; the Y→Z transpose runs on a
    second stream with those events as ``input_ready``, so DIRECT's copy engine sends
    each slab to the peers while the next is transformed. The FFT along Z (the slowest
    axis of the X-fastest Z-pencil: a strided cuFFT plan) follows once every chunk has
    arrived. Backward mirrors it: the inverse FFT along Z runs in slabs of Y rows, each
    sent by the Z→Y transpose (``input_ready_axis=1``) while the next is transformed,
    then the 2-D inverse FFTs.
    """

    def __init__(self, grid: GridDesc, r2c: bool, dtype: np.dtype) -> None:
        import cupy

        self.cupy = cupy
        self.grid = grid
        self.r2c = r2c
        self.dtype = dtype  # spectral
        self.plans: dict[tuple[Any, ...], Any] = {}
        self.bufs: dict[int, Any] = {}
        self.side: Any = None
        self.events: list[Any] = []
        try:
            chunks = int(os.environ.get("CUDECOMP_FFT_CHUNKS", _STREAM_CHUNKS))
        except ValueError:
            chunks = _STREAM_CHUNKS
        self.chunks = max(1, chunks)

    def buffer(self, axis: int) -> Any:
        """Return the plan's library array of spectral pencil ``axis`` (peers map it: DIRECT copies once, into it)."""
        b = self.bufs.get(axis)
        if b is None:
            b = self.bufs[axis] = self.grid.empty_pencil(axis, self.dtype)
        return b

    def plan2(self, a: Any) -> Any:
        """Return a cached cuFFT plan over axes (1, 2) of arrays shaped like ``a`` (C order)."""
        value_type = "R2C" if self.r2c else "C2C"
        key = (a.shape, a.dtype.str, value_type)
        p = self.plans.get(key)
        if p is None:
            import cupyx.scipy.fft

            p = self.plans[key] = cupyx.scipy.fft.get_fft_plan(a, axes=(1, 2), value_type=value_type)
        return p

    def zfft(self, a: Any, out: Any, inverse: bool, lo: int = 0, hi: int | None = None) -> None:
        """Unscaled FFT along axis 0 (Z) of Y rows ``lo:hi`` of ``a`` into ``out`` (may be ``a``).

        Both are X-fastest Z-pencils shaped alike; the plan (strided along Z, batched over
        the rows and X at unit distance) reads and writes through the views' pointers.
        """
        from cupy.cuda import cufft

        nz, ny, nx = a.shape
        hi = ny if hi is None else hi
        key = ("z", a.shape, a.dtype.str, hi - lo)
        p = self.plans.get(key)
        if p is None:
            t = cufft.CUFFT_Z2Z if a.dtype == np.complex128 else cufft.CUFFT_C2C
            # cufftPlanMany's arguments, as CuPy's own N-D planning passes them.
            p = self.plans[key] = cufft.PlanNd((nz,), (nz,), ny * nx, 1, (nz,), ny * nx, 1, t, (hi - lo) * nx, "C", 0, None)
        p.fft(a[:, lo:hi], out[:, lo:hi], cufft.CUFFT_INVERSE if inverse else cufft.CUFFT_FORWARD)

    def streamed(self, n: int, step: Any, move: Any) -> None:
        """Run ``step(lo, hi)`` in slabs of ``n`` cells, each feeding ``move`` as it is done.

        The steps run on the current stream, each followed by an event; ``move(stream,
        marks)`` (a transpose with those ``input_ready`` marks) runs on a second stream,
        and the current stream then waits for it.
        """
        cp = self.cupy
        main = cp.cuda.get_current_stream()
        if self.side is None:
            self.side = cp.cuda.Stream(non_blocking=True)
        k = min(self.chunks, n)
        cuts = [n * (j + 1) // k for j in range(k)]
        while len(self.events) < k + 1:
            self.events.append(cp.cuda.Event(block=False, disable_timing=True))
        edge = self.events[k]
        edge.record(main)
        self.side.wait_event(edge)  # earlier work on the stream: the buffers are free
        marks, lo = [], 0
        for e, hi in zip(self.events, cuts, strict=False):
            step(lo, hi)
            e.record(main)
            marks.append((e, hi))
            lo = hi
        move(self.side.ptr, marks)
        edge.record(self.side)
        main.wait_event(edge)

    def forward(self, a: Any, out: Any, in_place: bool) -> Any:
        """Transform forward into the Z-pencil: our buffer (``in_place``), ``out``, or a new array."""
        from cupy.cuda import cufft

        y, z = self.buffer(1), self.buffer(2)

        def fft2(lo: int, hi: int) -> None:
            self.plan2(a[lo:hi]).fft(a[lo:hi], y[lo:hi], cufft.CUFFT_FORWARD)

        self.streamed(y.shape[0], fft2, lambda st, marks: self.grid.transpose_y_to_z(y, z, stream=st, input_ready=marks))
        dst = z if in_place else self.cupy.empty_like(z) if out is None else out
        self.zfft(z, dst, False)
        return dst

    def backward(self, a: Any, transposed: bool, stream: int | None, scale: float) -> Any:
        """Run the inverse FFT along Z and Z→Y of the spectral pencil ``a``; return the Y-pencil (a buffer of ours).

        ``scale`` multiplies each slab right after its FFT: SM work that runs beside the
        exchange of the slabs before it, rather than a pass of its own at the end.
        """
        y, z = self.buffer(1), self.buffer(2)
        src = a if transposed else self.grid.transpose_y_to_z(a, z, stream=stream)

        def step(lo: int, hi: int) -> None:
            self.zfft(src, z, True, lo, hi)
            if scale != 1.0:
                z[:, lo:hi] *= scale

        def move(st: int, marks: list[tuple[Any, int]]) -> None:
            self.grid.transpose_z_to_y(z, y, stream=st, input_ready=marks, input_ready_axis=1)

        self.streamed(z.shape[1], step, move)
        return y


# ---------------------------------------------------------------------------------------
# The plan


class FFT:
    """A distributed 3-D FFT plan over ``handle``'s ranks (collective to create and destroy).

    Args:
        handle: The library handle; every rank of its communicator creates the plan with
            the same arguments.
        gdims: Global grid ``(X, Y, Z)`` of the real-space data (for ``r2c`` the real
            array; the spectral grid is ``(X // 2 + 1, Y, Z)``).
        pdims: Process grid ``(P_rows, P_cols)``. ``None`` or ``(0, 0)`` times the
            forward and backward transform on every usable process grid of the rank
            count (and every backend of ``backend`` when it is a list) and keeps the
            fastest (see ``autotune_times``). The grid decides the schedule: ``local``
            (one rank), ``slab-xy`` (``P_rows == 1``), ``slab-yz`` (``P_cols == 1``) or
            ``pencil``.
        kind: ``"c2c"`` or ``"r2c"`` (``forward`` real to complex, ``backward`` complex
            to real).
        dtype: Real-space element type: ``complex64`` or ``complex128`` for ``c2c``
            (default ``complex128``), ``float32`` or ``float64`` for ``r2c`` (default
            ``float64``); a NumPy dtype, its name, or a ``cudecomp.DataType`` member.
            The spectral type is the complex type of the same precision.
        norm: As in ``numpy.fft``: ``"backward"`` (``backward`` scales by ``1/N``),
            ``"ortho"`` (both by ``1/sqrt(N)``) or ``"forward"`` (``forward`` scales by
            ``1/N``), ``N = X * Y * Z``.
        transposed_out: ``False``: spectral data lives in the X-pencil of the spectral
            grid, laid out like the input (``a[kz, ky, kx]``); ``True``: it stays in
            the Z-pencil where the forward transform ends (see ``output_info``), which
            skips the return transposes (two on pencil grids, one on slabs, none on one
            rank).
        backend: Transpose backend: a ``TransposeCommBackend`` member; a list of them
            to time (with the process grids when ``pdims`` is ``None``); or ``None``
            for ``config``'s backend (default ``MPI_P2P``).
        config: Optional base configuration whose ``rank_order``,
            ``transpose_comm_backend`` and ``halo_comm_backend`` are used; its
            ``gdims``, ``pdims``, ``gdims_dist`` and memory orders are replaced.
        fft_library: ``"auto"`` (``scipy.fft`` when SciPy is installed, else
            ``numpy.fft``; ``cupy`` in the GPU variant), ``"scipy"``, ``"numpy"`` or
            ``"cupy"``.
        workers: Worker threads of ``scipy.fft`` (``None``: SciPy's default, one);
            ignored by the other libraries.
        autotune_reps: Timed forward + backward pairs per candidate when autotuning.
        comm: The handle's ``mpi4py`` communicator, used only to agree on the
            autotuner's choice; ``None`` means ``MPI.COMM_WORLD``, which is right
            whenever the handle spans all processes (autotuning on a handle over fewer
            ranks needs it).

    The arguments are compared across the handle's ranks: where they differ, or fail on
    some rank, every rank raises (that rank its own error, the others
    ``InvalidUsageError`` naming it) instead of waiting in an exchange.

    Raises:
        TypeError: An argument of the wrong type (e.g. ``gdims`` or ``pdims`` not
            integers, a ``dtype`` that does not fit ``kind``).
        InvalidUsageError: Unknown ``kind``, ``norm`` or ``fft_library``; bad ``gdims``,
            ``pdims`` or ``autotune_reps``; arguments that differ between ranks.
        NotSupportedError: A process grid on which some rank would own no cells of a
            pencil the schedule uses, or no usable process grid at all.
    """

    def __init__(
        self,
        handle: Handle,
        gdims: Sequence[int],
        pdims: Sequence[int] | None = None,
        *,
        kind: Kind = "c2c",
        dtype: Any = None,
        norm: Norm = "backward",
        transposed_out: bool = False,
        backend: TransposeCommBackend | Sequence[TransposeCommBackend] | None = None,
        config: GridDescConfig | None = None,
        fft_library: str = "auto",
        workers: int | None = None,
        autotune_reps: int = 3,
        comm: Any = None,
    ) -> None:
        self._grids: list[GridDesc] = []
        if not isinstance(handle, Handle):
            raise TypeError(f"handle: expected a cudecomp.Handle, got {type(handle).__name__}")
        # Every argument is checked, then the ranks agree on them: a rank whose arguments
        # fail, or differ, would otherwise leave the others waiting in the first exchange.
        what = "cudecomp.fft.FFT arguments"
        try:
            g = _ints("gdims", gdims, 3)
            if min(g) < 1:
                raise InvalidUsageError(f"gdims {g}: expected three positive extents (X, Y, Z)")
            p = None if pdims is None else _ints("pdims", pdims, 2)
            if kind not in _KINDS:
                raise InvalidUsageError(f"kind {kind!r}: expected 'c2c' or 'r2c'")
            if norm not in _NORMS:
                raise InvalidUsageError(f"norm {norm!r}: expected 'backward', 'ortho' or 'forward'")
            in_dtype, out_dtype = _dtypes(kind, dtype)
            backends = _backend_list(backend)
            if config is not None and not isinstance(config, GridDescConfig):
                raise TypeError(f"config: expected a cudecomp.GridDescConfig, got {type(config).__name__}")
            (reps,) = _ints("autotune_reps", (autotune_reps,), 1, "an integer")
            if reps < 1:
                raise InvalidUsageError(f"autotune_reps {reps}: expected at least 1")
            if workers is not None:
                _ints("workers", (workers,), 1, "an integer or None")
            if comm is not None and not (hasattr(comm, "allreduce") and hasattr(comm, "size")):
                raise TypeError(f"comm: expected an mpi4py communicator or None, got {type(comm).__name__}")
            local = _make_local(fft_library, norm, workers)
        except Exception as e:
            with contextlib.suppress(Exception):  # a finalized handle: this rank's own error stands
                handle._agree(what, None, f"{type(e).__name__}: {e}")
            raise
        key = (kind, norm, bool(transposed_out), g, p, str(in_dtype), [b and b.name for b in backends], reps, repr(config))
        handle._agree(what, repr(key).encode())
        self._kind: Kind = kind
        self._norm: Norm = norm
        self._transposed = bool(transposed_out)
        self._gdims = (g[0], g[1], g[2])
        self._spectral_gdims = (g[0] // 2 + 1, g[1], g[2]) if kind == "r2c" else self._gdims
        self._in_dtype, self._out_dtype = in_dtype, out_dtype
        self._handle = handle
        self._local = local
        self._base = config.copy() if config is not None else GridDescConfig()
        self._streams: dict[int, Any] = {}
        self._scratch: dict[str, Any] = {}
        self._one_gpu_each: bool | None = None
        self._comm = comm
        self.autotune_times: dict[tuple[tuple[int, int], str], float] = {}
        """Autotuning: seconds of one forward + backward (slowest rank's median) per (pdims, backend name); empty without."""

        n = handle.nranks
        if p is None or p == (0, 0):
            cands = [p for p in _factor_pairs(n) if _usable(self._gdims, self._spectral_gdims[0], p)]
            if not cands:
                raise NotSupportedError(f"no process grid of {n} ranks leaves every pencil of {self._gdims} non-empty")
        else:
            if min(p) < 1 or p[0] * p[1] != n:
                raise InvalidUsageError(f"pdims {p}: expected (P_rows, P_cols) with P_rows * P_cols == {n} ranks")
            if not _usable(self._gdims, self._spectral_gdims[0], p):
                raise NotSupportedError(
                    f"pdims {p}: some rank would own no cells of a pencil of the {schedule_of(p)} schedule on {self._gdims}"
                    f"{' (spectral ' + str(self._spectral_gdims) + ')' if kind == 'r2c' else ''}"
                )
            cands = [(p[0], p[1])]
        trials = [(p, b) for p in cands for b in backends]
        if len(trials) == 1:
            self._build(*trials[0])
        else:
            self._autotune(trials, reps)

    # -- construction ------------------------------------------------------------------

    def _config(
        self, gdims: tuple[int, int, int], pdims: tuple[int, int], backend: TransposeCommBackend | None, streams: bool | None = None
    ) -> tuple[GridDescConfig, bool]:
        """Return the grid configuration of ``gdims`` and whether the plan streams its slabs on it (``streams``: decided already)."""
        cfg = self._base.copy()
        cfg.gdims = gdims
        cfg.gdims_dist = (0, 0, 0)
        cfg.pdims = pdims
        if backend is not None:
            cfg.transpose_comm_backend = backend
        if streams is None:
            streams = _streams_slabs(cfg, self._own_gpus)
        cfg.transpose_mem_order = _STREAMED_ORDER if streams else _MEM_ORDER[schedule_of(pdims)]
        return cfg, streams

    def _own_gpus(self) -> bool:
        """Whether every rank drives a GPU of its own (collective the first time; cached)."""
        if self._one_gpu_each is None:
            self._one_gpu_each = self._handle.one_gpu_per_rank()
        return self._one_gpu_each

    def _build(self, pdims: tuple[int, int], backend: TransposeCommBackend | None) -> None:
        self._release()
        self._schedule: Schedule = schedule_of(pdims)
        cfg, streams = self._config(self._gdims, pdims, backend)
        grid = self._handle.create_grid(cfg)
        self._grids = [grid]
        if self._kind == "r2c":
            scfg, _ = self._config(self._spectral_gdims, pdims, backend, streams)
            scfg.rank_order = grid.config.rank_order  # the resolved order: the same split of Y and Z
            try:
                self._grids.append(self._handle.create_grid(scfg))
            except BaseException:
                self._release()
                raise
        self._pdims = pdims
        self._slabs = _SlabStream(self.spectral_grid, self._kind == "r2c", self._out_dtype) if streams else None
        self._in_info = grid.get_pencil_info(0)
        self._out_axis = 2 if self._transposed else 0
        self._out_info = self.spectral_grid.get_pencil_info(self._out_axis)

    def _autotune(self, trials: list[tuple[tuple[int, int], TransposeCommBackend | None]], reps: int) -> None:
        comm_max = self._allreduce_max
        comm_max(0.0)  # checks the communicator before any grid exists
        best: tuple[float, tuple[int, int], TransposeCommBackend | None] | None = None
        for pdims, backend in trials:
            try:
                self._build(pdims, backend)
            except NotSupportedError:
                continue
            a = self.zeros_input()
            a += 1
            times = []
            for i in range(1 + max(1, reps)):
                t0 = time.perf_counter()
                self.backward(self.forward(a))
                self._sync()
                if i:
                    times.append(time.perf_counter() - t0)
            t = comm_max(float(np.median(times)))
            name = backend.name if backend is not None else TransposeCommBackend(int(self.grid.config.transpose_comm_backend)).name
            self.autotune_times[(pdims, name)] = t
            if best is None or t < best[0]:
                best = (t, pdims, backend)
        self._release()
        if best is None:
            raise NotSupportedError("autotuning: no candidate process grid and backend could be created")
        self._build(best[1], best[2])

    def _allreduce_max(self, v: float) -> float:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD if self._comm is None else self._comm
        if comm.size != self._handle.nranks:
            raise InvalidUsageError(
                f"autotuning a plan on a handle of {self._handle.nranks} ranks needs its communicator: pass comm= (or pdims)"
            )
        return float(comm.allreduce(v, op=MPI.MAX))

    def _sync(self) -> None:
        if self._local.gpu:
            import cupy

            cupy.cuda.get_current_stream().synchronize()

    def _release(self) -> None:
        self._scratch = {}
        self._slabs = None
        for g in reversed(self._grids):
            g.destroy()
        self._grids = []

    # -- properties --------------------------------------------------------------------

    @property
    def grid(self) -> GridDesc:
        """The real-space grid descriptor (``gdims``); its X-pencil holds ``forward``'s input."""
        self._alive()
        return self._grids[0]

    @property
    def spectral_grid(self) -> GridDesc:
        """The spectral grid descriptor: ``(X // 2 + 1, Y, Z)`` for ``r2c``, the same object as ``grid`` for ``c2c``."""
        self._alive()
        return self._grids[-1]

    @property
    def kind(self) -> Kind:
        """``"c2c"`` or ``"r2c"``."""
        return self._kind

    @property
    def norm(self) -> Norm:
        """The normalisation (``numpy.fft`` semantics)."""
        return self._norm

    @property
    def gdims(self) -> tuple[int, int, int]:
        """Global real-space grid ``(X, Y, Z)``."""
        return self._gdims

    @property
    def spectral_gdims(self) -> tuple[int, int, int]:
        """Global spectral grid: ``(X // 2 + 1, Y, Z)`` for ``r2c``, ``gdims`` for ``c2c``."""
        return self._spectral_gdims

    @property
    def pdims(self) -> tuple[int, int]:
        """The process grid ``(P_rows, P_cols)`` in use (chosen by the autotuner when asked)."""
        self._alive()
        return self._pdims

    @property
    def schedule(self) -> Schedule:
        """``"local"``, ``"slab-xy"``, ``"slab-yz"`` or ``"pencil"`` (see the module documentation)."""
        self._alive()
        return self._schedule

    @property
    def transposed_out(self) -> bool:
        """Whether spectral data stays in the Z-pencil (``True``) or returns to the X-pencil."""
        return self._transposed

    @property
    def input_dtype(self) -> np.dtype:
        """NumPy dtype of real-space arrays (``forward`` input, ``backward`` output)."""
        return self._in_dtype

    @property
    def output_dtype(self) -> np.dtype:
        """NumPy dtype of spectral arrays (``forward`` output, ``backward`` input): complex."""
        return self._out_dtype

    @property
    def input_info(self) -> PencilInfo:
        """Describe this rank's real-space pencil: the X-pencil of ``grid`` (array ``a[z, y, x]``)."""
        self._alive()
        return self._in_info

    @property
    def output_info(self) -> PencilInfo:
        """Describe this rank's spectral pencil, where ``forward`` writes and ``backward`` reads.

        The X-pencil of ``spectral_grid`` (array ``a[kz, ky, kx]``, ``kx`` contiguous)
        without ``transposed_out``. With it, the Z-pencil of ``spectral_grid``, whose
        layout depends on the schedule: ``a[ky, kx, kz]`` (``kz`` contiguous) for
        ``pencil`` and ``slab-xy``, ``a[kx, kz, ky]`` (``ky`` contiguous) for
        ``slab-yz``, ``a[kz, ky, kx]`` for ``local``. Use its ``order``, ``lo``,
        ``global_slices`` and ``to_global_axes``, or ``wavenumbers()``, rather than
        assuming one.
        """
        self._alive()
        return self._out_info

    @property
    def output_axis(self) -> int:
        """The pencil (0 = X, 2 = Z) of ``spectral_grid`` that ``output_info`` describes."""
        return self._out_axis

    def _alive(self) -> None:
        if not self._grids:
            raise InvalidUsageError("this FFT plan was destroyed")

    # -- allocation --------------------------------------------------------------------

    def empty_input(self) -> Any:
        """Allocate an uninitialised real-space array (NumPy or CuPy) of shape ``input_info.array_shape``."""
        return self.grid.empty_pencil(0, self._in_dtype)

    def zeros_input(self) -> Any:
        """As ``empty_input``, filled with zeros."""
        return self.grid.zeros_pencil(0, self._in_dtype)

    def empty_output(self) -> Any:
        """Allocate an uninitialised spectral array of shape ``output_info.array_shape`` (complex)."""
        return self.spectral_grid.empty_pencil(self._out_axis, self._out_dtype)

    def zeros_output(self) -> Any:
        """As ``empty_output``, filled with zeros."""
        return self.spectral_grid.zeros_pencil(self._out_axis, self._out_dtype)

    # -- index helpers -----------------------------------------------------------------

    def _xp(self) -> Any:
        if self._local.gpu:
            import cupy

            return cupy
        return np

    def _broadcast(self, info: PencilInfo, full: Sequence[np.ndarray], dtype: Any) -> tuple[Any, Any, Any]:
        """Per global axis, ``full[g]`` cut to this rank's range and shaped to broadcast against the pencil array."""
        xp = self._xp()
        out: list[Any] = [None, None, None]
        for p in range(3):
            g = info.order[p]
            shape = [1, 1, 1]
            k = 2 - p
            v = full[g][info.lo[p] : info.hi[p] + 1]
            shape[k] = v.size
            out[g] = xp.asarray(v.astype(dtype).reshape(shape))
        return out[0], out[1], out[2]

    def modes(self) -> tuple[Any, Any, Any]:
        """Integer mode numbers ``(mx, my, mz)`` of this rank's spectral pencil (``output_info``).

        Each is an ``int64`` array (NumPy or CuPy) of three axes with one of extent more
        than 1, so that they broadcast against a spectral array. Along a full axis of
        ``N`` points the modes are ``numpy.fft.fftfreq(N, 1 / N)``: ``0, 1, ..., -1``,
        with ``-N // 2`` at the Nyquist index of an even ``N``. Along the halved X axis
        of ``r2c`` they are ``0 .. X // 2`` (``numpy.fft.rfftfreq(X, 1 / X)``).
        """
        full = []
        for g in range(3):
            n = self._gdims[g]
            f = np.fft.rfftfreq(n, 1.0 / n) if (g == 0 and self._kind == "r2c") else np.fft.fftfreq(n, 1.0 / n)
            full.append(np.rint(f).astype(np.int64))
        return self._broadcast(self.output_info, full, np.int64)

    def wavenumbers(self, lengths: float | Sequence[float] = 2 * math.pi) -> tuple[Any, Any, Any]:
        """Angular wavenumbers ``(kx, ky, kz)`` of this rank's spectral pencil: ``2 pi m / L``.

        Args:
            lengths: Box length ``L`` per global axis (X, Y, Z), or one for all three;
                the default ``2 pi`` gives ``k = m``, the mode numbers as floats.

        Returns:
            Three real arrays (the plan's precision, NumPy or CuPy) broadcastable
            against a spectral array, as ``modes()`` but scaled; along an axis they
            equal ``2 * pi * numpy.fft.fftfreq(N, L / N)`` (``rfftfreq`` along the
            halved X axis of ``r2c``) at this rank's indices.
        """
        ls = _lengths(lengths)
        mx, my, mz = self.modes()
        real = self._in_dtype if self._kind == "r2c" else _REAL[self._in_dtype]
        return tuple(m.astype(real) * real.type(2 * math.pi / L) for m, L in zip((mx, my, mz), ls, strict=True))  # type: ignore[return-value]

    def coordinates(self, lengths: float | Sequence[float] = 2 * math.pi) -> tuple[Any, Any, Any]:
        """Grid-point coordinates ``(x, y, z)`` of this rank's real-space pencil (``input_info``).

        Args:
            lengths: Box length per global axis (X, Y, Z), or one for all three; point
                ``i`` of an axis of ``N`` points lies at ``i * L / N``.

        Returns:
            Three real arrays (the plan's precision, NumPy or CuPy) broadcastable
            against a real-space array.
        """
        ls = _lengths(lengths)
        real = self._in_dtype if self._kind == "r2c" else _REAL[self._in_dtype]
        full = [np.arange(n) * (L / n) for n, L in zip(self._gdims, ls, strict=True)]
        return self._broadcast(self.input_info, full, real)

    # -- transforms --------------------------------------------------------------------

    def _check(self, a: Any, info: PencilInfo, dtype: np.dtype, what: str, writable: bool = False) -> None:
        xp = self._xp()
        if not isinstance(a, xp.ndarray):
            kind = "CuPy" if self._local.gpu else "NumPy"
            raise TypeError(f"{what}: expected a {kind} array, got {type(a).__name__}")
        if a.dtype != dtype:
            raise TypeError(f"{what}: expected dtype {dtype} for this {self._kind} plan, got {a.dtype}")
        if tuple(a.shape) != tuple(info.array_shape):
            raise InvalidUsageError(f"{what}: expected shape {tuple(info.array_shape)} (this rank's pencil), got {tuple(a.shape)}")
        if not a.flags.c_contiguous:
            raise InvalidUsageError(f"{what}: the array must be C-contiguous")
        if writable and not self._local.gpu and not a.flags.writeable:
            raise InvalidUsageError(f"{what}: the array must be writable")

    @contextlib.contextmanager
    def _on(self, stream: Any) -> Iterator[int | None]:
        """Make the operation's stream CuPy's current one (GPU); yields its handle for the transposes."""
        if not self._local.gpu:
            yield None
            return
        import cupy

        ptr = _stream_ptr(stream)
        if int(cupy.cuda.get_current_stream().ptr) == ptr:
            yield ptr
            return
        s = self._streams.get(ptr)
        if s is None:
            from_external = getattr(cupy.cuda.Stream, "from_external", None)
            s = from_external(_StreamRef(ptr)) if from_external else cupy.cuda.ExternalStream(ptr)
            if len(self._streams) < 8:
                self._streams[ptr] = s
        with s:
            yield ptr

    def _finish(self, r: Any, out: Any, scale: float) -> Any:
        """Scale ``r`` (ours, or already ``out``) and deliver it in ``out`` when given.

        Scaling into ``out`` is one pass over memory (a scaled copy), not a copy and then
        an in-place scaling.
        """
        if scale == 1.0:
            return _into(r, out)
        if out is None or r is out:
            r *= scale
            return r
        return self._xp().multiply(r, scale, out=out)

    def _tmp(self, key: str, axis: int) -> Any:
        """Scratch pencil ``axis`` of the spectral grid, kept by the plan (CPU variant); None on GPUs.

        Reusing it spares the page faults of fresh arrays on every call; on GPUs CuPy's
        memory pool already recycles memory (stream-ordered).
        """
        if self._local.gpu:
            return None
        buf = self._scratch.get(key)
        if buf is None:
            buf = self.spectral_grid.empty_pencil(axis, self._out_dtype)
            self._scratch[key] = buf
        return buf

    def forward(self, a: Any, out: Any = None, *, stream: Any = None) -> Any:
        """Forward transform of this rank's real-space pencil (collective).

        Equals, on every rank, ``numpy.fft.fftn`` (``c2c``) or ``numpy.fft.rfftn``
        (``r2c``) of the global array ``A[z, y, x]`` at this rank's spectral indices:
        ``out[output_info.interior_slices]`` is
        ``fftn(A)[output_info.global_slices].transpose(output_info.to_global_axes)``
        (the transpose is the identity without ``transposed_out``).

        Args:
            a: The X-pencil of ``grid``: shape ``input_info.array_shape``, dtype
                ``input_dtype``, C-contiguous; NumPy (CPU variant) or CuPy (GPU). Not
                modified.
            out: Optional spectral array (shape ``output_info.array_shape``, dtype
                ``output_dtype``) to write into; ``None`` allocates one.
            stream: GPU variant: the stream to run on (``None``: CuPy's current stream;
                an int handle, an object with ``__cuda_stream__`` or with an int
                ``ptr``). Local FFTs and transposes are ordered on it and nothing waits
                for it on the host. Ignored by the CPU variant.

        Returns:
            ``out`` or the new spectral array.

        Raises:
            TypeError: Not an array of the variant, or the wrong dtype (e.g. a complex
                array for an ``r2c`` plan).
            InvalidUsageError: Wrong shape, not C-contiguous, or a destroyed plan.
        """
        self._alive()
        self._check(a, self._in_info, self._in_dtype, "forward input")
        if out is not None:
            self._check(out, self._out_info, self._out_dtype, "forward out", writable=True)
        L, G, r2c = self._local, self.spectral_grid, self._kind == "r2c"
        scale = L.scale(False, math.prod(self._gdims))
        T = self._tmp
        tr = self._transposed

        def first(x: Any, axes: tuple[int, ...], into: Any) -> Any:  # never overwrites the user's input
            return L.r2c(x, axes, into) if r2c else L.c2c(x, axes, False, into)

        with self._on(stream) as s:
            sch = self._schedule
            if sch == "local":
                return self._finish(first(a, (0, 1, 2), out), out, scale)
            if self._slabs is not None:
                c = self._slabs.forward(a, out if tr and scale == 1.0 else None, not tr)
                if tr:
                    return self._finish(c, out, scale)
                return G.transpose_z_to_y(self._finish(c, None, scale), out, stream=s)
            if sch == "slab-xy":
                c = G.transpose_y_to_z(first(a, (1, 2), T("x", 0)), out if tr else T("z", 2), stream=s)
                c = L.c2c(c, (2,), False, overwrite=True)
                if tr:
                    return self._finish(c, out, scale)
                return G.transpose_z_to_y(self._finish(c, None, scale), out, stream=s)
            if sch == "slab-yz":
                c = G.transpose_x_to_y(first(a, (2,), T("x", 0)), out if tr else T("y", 1), stream=s)
                c = L.c2c(c, (1, 2), False, overwrite=True)
                if tr:
                    return self._finish(c, out, scale)
                return G.transpose_y_to_x(self._finish(c, None, scale), out, stream=s)
            b = first(a, (2,), T("x", 0))
            c = L.c2c(G.transpose_x_to_y(b, T("y", 1), stream=s), (2,), False, overwrite=True)
            del b
            d = L.c2c(G.transpose_y_to_z(c, out if tr else T("z", 2), stream=s), (2,), False, overwrite=True)
            del c
            if tr:
                return self._finish(d, out, scale)
            e = G.transpose_z_to_y(self._finish(d, None, scale), T("y", 1), stream=s)
            return G.transpose_y_to_x(e, out, stream=s)

    def backward(self, a: Any, out: Any = None, *, stream: Any = None) -> Any:
        """Backward (inverse) transform of this rank's spectral pencil into its real-space X-pencil (collective).

        Equals ``numpy.fft.ifftn`` (``c2c``) or ``numpy.fft.irfftn`` with
        ``s = (Z, Y, X)`` (``r2c``) of the global spectral array, with the plan's
        ``norm``. For ``r2c`` the input is taken as the half spectrum of a real field:
        the imaginary parts of the modes that must be real (``kx = 0`` and, for even
        ``X``, the Nyquist plane, at their self-conjugate points) are ignored, as
        ``irfftn`` does.

        Args:
            a: The spectral pencil: shape ``output_info.array_shape``, dtype
                ``output_dtype``, C-contiguous. Not modified.
            out: Optional real-space array (shape ``input_info.array_shape``, dtype
                ``input_dtype``); ``None`` allocates one.
            stream: GPU variant: the stream to run on (as for ``forward``).

        Returns:
            ``out`` or the new real-space array.

        Raises:
            TypeError: Not an array of the variant, or the wrong dtype.
            InvalidUsageError: Wrong shape, not C-contiguous, or a destroyed plan.
        """
        self._alive()
        self._check(a, self._out_info, self._out_dtype, "backward input")
        if out is not None:
            self._check(out, self._in_info, self._in_dtype, "backward out", writable=True)
        L, G, r2c = self._local, self.spectral_grid, self._kind == "r2c"
        X, Y, Z = self._gdims
        scale = L.scale(True, X * Y * Z)
        T = self._tmp
        tr = self._transposed

        def middle(x: Any, axes: tuple[int, ...], own: bool, key: str, axis: int) -> Any:
            """Run an inner c2c stage: in place on our arrays, into scratch from the user's."""
            return L.c2c(x, axes, True, overwrite=True) if own else L.c2c(x, axes, True, T(key, axis))

        def last(x: Any, axes: tuple[int, ...], s: tuple[int, ...], own: bool, kept: bool = False) -> Any:
            """Run the final stage, into ``out`` or a new array (never into scratch).

            When the result is still to be scaled, the stage writes a new array (or ``x``
            in place, when ``x`` is a fresh array of ours: the GPU variant keeps no
            scratch, except the streamed slabs' buffers, ``kept``, which may be
            overwritten but never returned) and the scaling delivers it into ``out``.
            """
            into = out if scale == 1.0 else None
            fresh = own and L.gpu and not kept
            r = L.c2r(x, axes, s, into, overwrite=own) if r2c else L.c2c(x, axes, True, into, overwrite=fresh)
            return self._finish(r, out, scale)

        with self._on(stream) as st:
            sch = self._schedule
            if sch == "local":
                return last(a, (0, 1, 2), (Z, Y, X), False)
            if self._slabs is not None:
                c = self._slabs.backward(a, tr, st, scale)
                scale = 1.0  # applied slab by slab, beside the exchange
                return last(c, (1, 2), (Y, X), True, kept=True)
            if sch == "slab-xy":
                c = middle(a, (2,), False, "z", 2) if tr else middle(G.transpose_y_to_z(a, T("z", 2), stream=st), (2,), True, "", 2)
                return last(G.transpose_z_to_y(c, T("x", 0), stream=st), (1, 2), (Y, X), True)
            if sch == "slab-yz":
                c = middle(a, (1, 2), False, "y", 1) if tr else middle(G.transpose_x_to_y(a, T("y", 1), stream=st), (1, 2), True, "", 1)
                return last(G.transpose_y_to_x(c, T("x", 0), stream=st), (2,), (X,), True)
            if tr:
                d = middle(a, (2,), False, "z", 2)
            else:
                d = middle(G.transpose_y_to_z(G.transpose_x_to_y(a, T("y", 1), stream=st), T("z", 2), stream=st), (2,), True, "", 2)
            c = middle(G.transpose_z_to_y(d, T("y", 1), stream=st), (2,), True, "", 1)
            del d
            return last(G.transpose_y_to_x(c, T("x", 0), stream=st), (2,), (X,), True)

    # -- lifetime ----------------------------------------------------------------------

    def destroy(self) -> None:
        """Destroy the plan's grid descriptors (collective); later use raises ``InvalidUsageError``."""
        self._alive()
        self._release()

    def __enter__(self) -> FFT:
        """Use the plan in a ``with`` block; leaving it calls ``destroy()``."""
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        """Destroy the plan (collective) unless already destroyed."""
        if self._grids:
            self._release()
        return False

    def __repr__(self) -> str:
        if not self._grids:
            return f"FFT({self._kind}, gdims={self._gdims}, destroyed)"
        return (
            f"FFT({self._kind}, gdims={self._gdims}, pdims={self._pdims}, schedule={self._schedule!r}, "
            f"dtype={self._in_dtype}, norm={self._norm!r}, transposed_out={self._transposed}, library={self._local.name!r})"
        )


def _dtypes(kind: str, dtype: Any) -> tuple[np.dtype, np.dtype]:
    """(real-space dtype, spectral dtype) of a plan."""
    if dtype is None:
        d = np.dtype(np.complex128 if kind == "c2c" else np.float64)
    elif isinstance(dtype, DataType):
        d = numpy_dtype(dtype)
    else:
        try:
            d = np.dtype(dtype)
        except TypeError as e:
            raise TypeError(f"dtype: expected a NumPy dtype or a cudecomp.DataType member, got {dtype!r}") from e
    if kind == "c2c":
        if d not in _REAL:
            raise TypeError(f"dtype {d}: a c2c plan takes complex64 or complex128")
        return d, d
    if d not in _COMPLEX:
        raise TypeError(f"dtype {d}: an r2c plan takes float32 or float64 (its real-space type)")
    return d, _COMPLEX[d]
