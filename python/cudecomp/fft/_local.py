"""Local FFTs: the library that transforms each rank's pencils (the core's RustFFT, NumPy, SciPy or CuPy)."""

from __future__ import annotations

import inspect
import math
import os
from typing import Any

import numpy as np

from .. import _cudecomp
from .._cudecomp import CPU_ONLY
from .._errors import InvalidUsageError, NotSupportedError
from ._args import _COMPLEX, _REAL


class _Local:
    """Local FFTs of one library.

    Stages are c2c over ``axes``, r2c and c2r (the last of ``axes`` is the halved one).
    With ``out`` the result is written into ``out`` (and ``out`` returned); without it
    the result is a new array, or the input itself when ``overwrite`` allows.
    """

    name = ""
    gpu = False
    #: Whether ``r2r`` (the cosine and sine transforms) is there.
    cosine_sine = False

    def __init__(self, norm: str) -> None:
        self.norm = norm

    def c2c(self, a: Any, axes: tuple[int, ...], inverse: bool, out: Any = None, overwrite: bool = False) -> Any:
        raise NotImplementedError

    def r2c(self, a: Any, axes: tuple[int, ...], out: Any = None) -> Any:
        raise NotImplementedError

    def c2r(self, a: Any, axes: tuple[int, ...], s: tuple[int, ...], out: Any = None, overwrite: bool = False) -> Any:
        raise NotImplementedError

    def r2r(self, a: Any, axis: int, kind: str, inverse: bool, out: Any = None, overwrite: bool = False) -> Any:
        """Cosine or sine transform ``kind`` (``"dct2"`` ...) along ``axis``, normalised (``scipy.fft``'s ``dct``/``idct``).

        Real or complex ``a`` (a complex array's real and imaginary parts are transformed).
        """
        raise NotImplementedError

    def r2r_axes(self, a: Any, transforms: tuple[tuple[int, str], ...], inverse: bool, out: Any = None, overwrite: bool = False) -> Any:
        """Apply the cosine and sine transforms ``(axis, kind)`` of ``transforms`` to ``a``, into ``out`` where given.

        One axis after another here; a library that transforms several axes at once
        (CuPy's, see ``_gpu_dct``) does so.
        """
        for k, (axis, kind) in enumerate(transforms):
            last = k == len(transforms) - 1
            a = self.r2r(a, axis, kind, inverse, out if last else None, overwrite or k > 0)
        return a

    def scale(self, inverse: bool, n: int) -> float:
        """Factor to apply once after all FFT stages (1 when the stages normalise themselves)."""
        return 1.0


def _scipy_r2r(m: Any, a: Any, axis: int, kind: str, inverse: bool, norm: str, **kw: Any) -> Any:
    """``dct``/``dst``/``idct``/``idst`` of ``scipy.fft`` (or ``cupyx.scipy.fft``) for ``kind``."""
    f = getattr(m, ("i" if inverse else "") + kind[:3])
    return f(a, type=int(kind[3]), axis=axis, norm=norm, **kw)


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


def _norm_scale(norm: str, inverse: bool, n: int) -> float:
    """``numpy.fft``'s factor for a transform over ``n`` points in one direction."""
    if norm == "ortho":
        return 1.0 / math.sqrt(max(n, 1))
    return 1.0 / max(n, 1) if (norm == "backward") == inverse else 1.0


class _RustLocal(_Local):
    """The core's transforms (RustFFT: AVX, SSE or NEON code picked at run time).

    Each stage applies its part of the norm inside the transform (no separate pass),
    reads its input and writes ``out`` directly (out of place costs no copy), and runs
    on ``threads`` threads with the GIL released. ``threads`` is resolved by the plan
    (``None`` until then: one).
    """

    name = "rustfft"
    cosine_sine = True

    def __init__(self, norm: str, threads: int | None) -> None:
        super().__init__(norm)
        self.threads = threads

    def _t(self) -> int:
        return self.threads or 1

    def c2c(self, a: Any, axes: tuple[int, ...], inverse: bool, out: Any = None, overwrite: bool = False) -> Any:
        a = np.ascontiguousarray(a)
        if out is None:
            out = a if overwrite else np.empty_like(a)
        scale = _norm_scale(self.norm, inverse, math.prod(a.shape[ax] for ax in axes))
        _cudecomp._local_fft("c2c", a, out, list(axes), inverse, scale, self._t())
        return out

    def r2c(self, a: Any, axes: tuple[int, ...], out: Any = None) -> Any:
        a = np.ascontiguousarray(a)
        if out is None:
            shape = list(a.shape)
            shape[axes[-1]] = shape[axes[-1]] // 2 + 1
            out = np.empty(shape, _COMPLEX[a.dtype])
        scale = _norm_scale(self.norm, False, math.prod(a.shape[ax] for ax in axes))
        _cudecomp._local_fft("r2c", a, out, list(axes), False, scale, self._t())
        return out

    def c2r(self, a: Any, axes: tuple[int, ...], s: tuple[int, ...], out: Any = None, overwrite: bool = False) -> Any:
        a = np.ascontiguousarray(a)
        if out is None:
            shape = list(a.shape)
            for ax, n in zip(axes, s, strict=True):
                shape[ax] = n
            out = np.empty(shape, _REAL[a.dtype])
        scale = _norm_scale(self.norm, True, math.prod(s))
        _cudecomp._local_fft("c2r", a, out, list(axes), True, scale, self._t(), overwrite and a.flags.writeable)
        return out

    def r2r(self, a: Any, axis: int, kind: str, inverse: bool, out: Any = None, overwrite: bool = False) -> Any:
        if out is not None and out is not a:
            np.copyto(out, a)
            a = out
        elif not (overwrite and a.flags.writeable and a.flags.c_contiguous):
            a = np.array(a, order="C")
        view = a if a.dtype.kind == "f" else a.view(_REAL[a.dtype]).reshape(*a.shape, 2)
        # A plan's 4-D arrays are batches of pencils: each field transforms as it would alone.
        _cudecomp._local_r2r(kind, view, axis, inverse, self.norm, self._t(), a.ndim == 4)
        return a


class _ScipyLocal(_Local):
    """``scipy.fft`` with worker threads; each stage applies the norm itself.

    ``scipy.fft`` has no ``out``: a c2c stage into ``out`` copies its input there and
    transforms it in place; r2c and c2r stages copy their result.
    """

    name = "scipy"
    cosine_sine = True

    def __init__(self, norm: str, workers: int | None) -> None:
        super().__init__(norm)
        try:
            import scipy.fft
        except ImportError as e:
            raise NotSupportedError("fft_library 'scipy' needs SciPy, which is not installed (pip install scipy)") from e

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

    def r2r(self, a: Any, axis: int, kind: str, inverse: bool, out: Any = None, overwrite: bool = False) -> Any:
        r = _scipy_r2r(self.m, a, axis, kind, inverse, self.norm, overwrite_x=overwrite, workers=self.workers)
        return _into(r, out)


class _CupyLocal(_Local):
    """cuFFT through CuPy, on CuPy's current stream.

    CuPy caches the cuFFT plans (``cupy.fft.config.get_plan_cache()``, 16 plans per device
    by default) and scales with a separate kernel, so the stages run unscaled and the
    plan applies the factor once (see ``scale``). Results are new arrays from CuPy's
    memory pool (on the current stream), the input transformed in place, or ``out``:
    a stage into ``out`` runs CuPy's cached plan of the stage straight into it, since
    ``cupyx.scipy.fft`` has no ``out`` and a copy afterwards is a whole extra pass over
    memory (where CuPy lacks that plan lookup, the stage falls back to the copy).
    """

    name = "cupy"
    cosine_sine = True
    gpu = True

    def __init__(self, norm: str) -> None:
        super().__init__(norm)
        import cupyx.scipy.fft
        from cupy.cuda import cufft

        self.m = cupyx.scipy.fft
        self.cufft = cufft
        try:
            from cupy.fft._fft import _get_cufft_plan_nd
        except ImportError:
            _get_cufft_plan_nd = None
        self.plan_nd = _get_cufft_plan_nd

    def _into_out(self, a: Any, out: Any, axes: tuple[int, ...], kind: str, inverse: bool) -> bool:
        """Run the unscaled ``kind`` FFT of ``a`` over ``axes`` into ``out`` with CuPy's cached plan.

        ``kind`` is ``"C2C"``, ``"R2C"`` or ``"C2R"`` (which overwrites ``a``). Returns
        False, having done nothing, where CuPy has no such plan lookup or refuses the layout.
        """
        if self.plan_nd is None or out is None or out is a or not (a.flags.c_contiguous and out.flags.c_contiguous):
            return False
        c = self.cufft
        double = a.dtype in (np.float64, np.complex128)
        fft_type = {
            "C2C": c.CUFFT_Z2Z if double else c.CUFFT_C2C,
            "R2C": c.CUFFT_D2Z if double else c.CUFFT_R2C,
            "C2R": c.CUFFT_Z2D if double else c.CUFFT_C2R,
        }[kind]
        out_size = None if kind == "C2C" else out.shape[axes[-1]] if kind == "C2R" else a.shape[axes[-1]] // 2 + 1
        try:
            plan = self.plan_nd(a.shape, fft_type, axes=axes, order="C", out_size=out_size)
        except (TypeError, ValueError):
            return False
        plan.fft(a, out, c.CUFFT_INVERSE if inverse else c.CUFFT_FORWARD)
        return True

    def c2c(self, a: Any, axes: tuple[int, ...], inverse: bool, out: Any = None, overwrite: bool = False) -> Any:
        if self._into_out(a, out, axes, "C2C", inverse):
            return out
        # "backward" leaves the forward unscaled, "forward" the inverse.
        norm = "forward" if inverse else "backward"
        if len(axes) == 1:
            r = (self.m.ifft if inverse else self.m.fft)(a, axis=axes[0], norm=norm, overwrite_x=overwrite)
        else:
            r = (self.m.ifftn if inverse else self.m.fftn)(a, axes=axes, norm=norm, overwrite_x=overwrite)
        return _into(r, out)

    def r2c(self, a: Any, axes: tuple[int, ...], out: Any = None) -> Any:
        if self._into_out(a, out, axes, "R2C", False):
            return out
        r = self.m.rfft(a, axis=axes[0], norm="backward") if len(axes) == 1 else self.m.rfftn(a, axes=axes, norm="backward")
        return _into(r, out)

    def c2r(self, a: Any, axes: tuple[int, ...], s: tuple[int, ...], out: Any = None, overwrite: bool = False) -> Any:
        # cuFFT's complex-to-real transforms overwrite their input.
        if out is not None and self.plan_nd is not None and self._into_out(a if overwrite else a.copy(), out, axes, "C2R", True):
            return out
        if len(axes) == 1:
            r = self.m.irfft(a, n=s[0], axis=axes[0], norm="forward", overwrite_x=overwrite)
        else:
            r = self.m.irfftn(a, s=s, axes=axes, norm="forward", overwrite_x=overwrite)
        return _into(r, out)

    def r2r(self, a: Any, axis: int, kind: str, inverse: bool, out: Any = None, overwrite: bool = False) -> Any:
        # The norm inside the transform: only the FFT stages leave theirs to the plan.
        from ._gpu_r2r import r2r

        return _into(r2r(a, axis, kind, inverse, self.norm), out)

    def r2r_axes(self, a: Any, transforms: tuple[tuple[int, str], ...], inverse: bool, out: Any = None, overwrite: bool = False) -> Any:
        from ._gpu_r2r import r2r_axes

        return r2r_axes(a, transforms, inverse, self.norm, out)

    def scale(self, inverse: bool, n: int) -> float:
        if self.norm == "ortho":
            return 1.0 / math.sqrt(n)
        if (self.norm == "backward") == inverse:
            return 1.0 / n
        return 1.0


_LIBRARIES = ("auto", "rustfft", "scipy", "numpy", "cupy")


def _make_local(library: str, norm: str, workers: int | None) -> _Local:
    """Return the local FFTs of ``library`` (on the CPU variant ``"auto"`` is ``"rustfft"``, the core's)."""
    if library not in _LIBRARIES:
        raise InvalidUsageError(f"fft_library {library!r}: expected 'auto', 'rustfft', 'scipy', 'numpy' or 'cupy'")
    if not CPU_ONLY:
        if library not in ("auto", "cupy"):
            raise InvalidUsageError(f"fft_library {library!r}: the GPU variant transforms with cupy")
        return _CupyLocal(norm)
    if library == "cupy":
        raise InvalidUsageError("fft_library 'cupy' needs the GPU variant")
    if library in ("auto", "rustfft"):
        return _RustLocal(norm, None if workers is None else _threads(workers))
    if library == "scipy":
        return _ScipyLocal(norm, workers)
    return _NumpyLocal(norm)


def _threads(workers: int) -> int:
    """Threads of ``workers`` as ``scipy.fft`` counts them (negative: from the CPU count back)."""
    return workers if workers > 0 else max(1, (os.cpu_count() or 1) + 1 + workers)
