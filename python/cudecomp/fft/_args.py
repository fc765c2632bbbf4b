"""The plan's argument types and the checks of its arguments."""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from .._alloc import numpy_dtype
from .._config import _check_elements
from .._enums import TransposeCommBackend
from .._errors import InvalidUsageError

Kind = Literal["c2c", "r2c"]
"""Transform kind: ``"c2c"`` (complex to complex) or ``"r2c"`` (real to complex; backward is complex to real)."""

Norm = Literal["backward", "ortho", "forward"]
"""Normalisation as in ``numpy.fft``: which direction is scaled by ``1/N`` (``"ortho"``: both by ``1/sqrt(N)``)."""


_NORMS = ("backward", "ortho", "forward")
_KINDS = ("c2c", "r2c")
_REAL: dict[np.dtype[Any], np.dtype[Any]] = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}
_COMPLEX: dict[np.dtype[Any], np.dtype[Any]] = {v: k for k, v in _REAL.items()}


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
        values = [lengths] * 3 if np.ndim(lengths) == 0 else list(lengths)
        if any(isinstance(v, str | bytes | bool | np.bool_) for v in values):
            raise TypeError(bad)
        ls = [float(v) for v in values]
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


def _dtypes(kind: str, dtype: Any) -> tuple[np.dtype, np.dtype]:
    """(real-space dtype, spectral dtype) of a plan."""
    d = np.dtype(np.complex128 if kind == "c2c" else np.float64) if dtype is None else numpy_dtype(dtype)
    if kind == "c2c":
        if d not in _REAL:
            raise TypeError(f"dtype {d}: a c2c plan takes complex64 or complex128")
        return d, d
    if d not in _COMPLEX:
        raise TypeError(f"dtype {d}: an r2c plan takes float32 or float64 (its real-space type)")
    return d, _COMPLEX[d]
