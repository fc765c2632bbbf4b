"""The plan's argument types, their checks (one rank's) and what the ranks agree on."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._alloc import numpy_dtype
from .._config import GridDescConfig, _check_elements
from .._enums import TransposeCommBackend
from .._errors import InvalidUsageError

Kind = Literal["c2c", "r2c", "r2r"]
"""Transform kind: ``"c2c"`` (complex data), ``"r2c"`` (real data, X an FFT axis halved to ``X // 2 + 1``), or
``"r2r"`` (real data, X a cosine or sine axis; spectral data complex where some axis is an FFT, real otherwise)."""

Transform = Literal["fft", "dct1", "dct2", "dct3", "dct4", "dst1", "dst2", "dst3", "dst4"]
"""The transform along one axis: ``"fft"`` (periodic) or a real-to-real type of ``scipy.fft``."""

TRANSFORMS: tuple[str, ...] = ("fft", "dct1", "dct2", "dct3", "dct4", "dst1", "dst2", "dst3", "dst4")

Norm = Literal["backward", "ortho", "forward"]
"""Normalisation as in ``numpy.fft``: which direction is scaled by ``1/N`` (``"ortho"``: both by ``1/sqrt(N)``)."""


_NORMS = ("backward", "ortho", "forward")
_KINDS = ("c2c", "r2c", "r2r")
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


def _dtypes(kind: str, dtype: Any, transforms: tuple[str, ...]) -> tuple[np.dtype, np.dtype]:
    """(real-space dtype, spectral dtype) of a plan."""
    d = np.dtype(np.complex128 if kind == "c2c" else np.float64) if dtype is None else numpy_dtype(dtype)
    if kind == "c2c":
        if d not in _REAL:
            raise TypeError(f"dtype {d}: a c2c plan takes complex64 or complex128")
        return d, d
    if d not in _COMPLEX:
        raise TypeError(f"dtype {d}: an {kind} plan takes float32 or float64 (its real-space type)")
    return d, (_COMPLEX[d] if "fft" in transforms else d)


def _name(what: str, value: Any, options: Sequence[str]) -> str:
    """Return ``value`` checked to be one of ``options`` (``TypeError`` for a non-string, ``InvalidUsageError`` otherwise)."""
    names = ", ".join(map(repr, options))
    if not isinstance(value, str):
        raise TypeError(f"{what}: expected one of {names}, got {value!r}")
    if value not in options:
        raise InvalidUsageError(f"{what} {value!r}: expected one of {names}")
    return str(value)


def _per_axis(what: str, value: Any, options: Sequence[str], noun: str) -> tuple[str, str, str]:
    """Return one name of ``options`` per axis (X, Y, Z) from a sequence of three (``noun``: what they are, in messages)."""
    bad = f"{what}: expected a sequence of 3 {noun} (X, Y, Z) of {', '.join(map(repr, options))}, got {value!r}"
    if isinstance(value, str | bytes):
        raise TypeError(bad)
    try:
        items = list(value)
    except TypeError:
        raise TypeError(bad) from None
    if len(items) != 3:
        raise InvalidUsageError(f"{what} {value!r}: expected 3 {noun}, one per axis (X, Y, Z)")
    a, b, c = (_name(f"{what}[{g}]", v, options) for g, v in enumerate(items))
    return (a, b, c)


def _transforms(transforms: Any) -> tuple[str, str, str]:
    """Return the per-axis transforms (X, Y, Z): ``None`` is three FFTs."""
    return ("fft", "fft", "fft") if transforms is None else _per_axis("transforms", transforms, TRANSFORMS, "names")


def _kind(kind: Any, transforms: tuple[str, str, str]) -> str:
    """Return the plan's kind: the given one, checked against the per-axis transforms, or the one they imply."""
    r2r = any(t != "fft" for t in transforms)
    if kind is None:
        return "r2c" if r2r and transforms[0] == "fft" else "r2r" if r2r else "c2c"
    if not isinstance(kind, str):
        raise TypeError(f"kind: expected 'c2c', 'r2c', 'r2r' or None, got {kind!r}")
    if kind not in _KINDS:
        raise InvalidUsageError(f"kind {kind!r}: expected 'c2c', 'r2c', 'r2r' or None")
    if kind == "c2c" and r2r:
        raise InvalidUsageError(f"kind 'c2c' with transforms {transforms}: cosine and sine transforms take real data (kind 'r2c' or 'r2r')")
    if kind == "r2c" and transforms[0] != "fft":
        raise InvalidUsageError(f"kind 'r2c' with transforms {transforms}: r2c halves X, which needs an FFT along X (kind 'r2r')")
    if kind == "r2r" and transforms[0] == "fft":
        raise InvalidUsageError(f"kind 'r2r' with transforms {transforms}: real data with an FFT along X is 'r2c'")
    return str(kind)


@dataclass(frozen=True)
class _PlanArgs:
    """A plan's arguments after their checks (``_parse``)."""

    gdims: tuple[int, int, int]
    pdims: tuple[int, int] | None
    kind: Kind
    transforms: tuple[str, str, str]
    norm: Norm
    transposed_out: bool
    in_dtype: np.dtype
    out_dtype: np.dtype
    backends: list[TransposeCommBackend | None]
    config: GridDescConfig | None
    autotune_reps: int
    workers: int | None
    comm: Any

    def agreement_key(self) -> list[tuple[str, str]]:
        """Return what every rank must pass alike, by name: all but its own threads and communicator object.

        Each value is canonical, so that arguments meaning the same agree: ``pdims``
        ``None`` and ``(0, 0)``; a ``numpy.str_`` and a ``str`` kind; ``config=None`` and
        ``GridDescConfig()``; ``backend=None`` and the configuration's backend. Only what
        the plan uses is compared: of ``config`` its rank order and halo backend (its
        transpose backend is ``backend``'s value when ``backend`` is ``None``; the other
        fields are replaced), and ``autotune_reps`` only where a search runs. The streaming
        settings (``CUDECOMP_FFT_*``) decide collective steps too: the ranks agreed on them
        when the handle was created.
        """
        base = self.config if self.config is not None else GridDescConfig()
        names = [(b if b is not None else TransposeCommBackend(int(base.transpose_comm_backend))).name for b in self.backends]
        search = self.pdims is None or self.pdims == (0, 0) or len(self.backends) > 1
        return [
            ("kind", self.kind),
            ("transforms", str(self.transforms)),
            ("norm", self.norm),
            ("transposed_out", str(self.transposed_out)),
            ("gdims", str(self.gdims)),
            ("pdims", "None (autotuned)" if self.pdims is None or self.pdims == (0, 0) else str(self.pdims)),
            ("dtype", str(self.in_dtype)),
            ("backend", names[0] if len(names) == 1 else "[" + ", ".join(names) + "]"),
            ("config.rank_order", base.rank_order.name),
            ("config.halo_comm_backend", base.halo_comm_backend.name),
            ("autotune_reps", str(self.autotune_reps) if search else "unused (no search)"),
        ]


def _parse(
    gdims: Any,
    pdims: Any,
    kind: Any,
    dtype: Any,
    norm: Any,
    transposed_out: Any,
    backend: Any,
    config: Any,
    autotune_reps: Any,
    workers: Any,
    comm: Any,
    transforms: Any = None,
) -> _PlanArgs:
    """Check a plan's arguments on this rank (``TypeError``, ``InvalidUsageError``) and return them parsed."""
    g = _ints("gdims", gdims, 3)
    if min(g) < 1:
        raise InvalidUsageError(f"gdims {g}: expected three positive extents (X, Y, Z)")
    p = None if pdims is None else _ints("pdims", pdims, 2)
    ts = _transforms(transforms)
    kind = _kind(kind, ts)
    for ax, t in enumerate(ts):
        least = 2 if t == "dct1" else 1
        if g[ax] < least:
            raise InvalidUsageError(f"transforms[{ax}] {t!r}: needs at least {least} points along its axis, gdims[{ax}] is {g[ax]}")
    if not isinstance(norm, str):
        raise TypeError(f"norm: expected 'backward', 'ortho' or 'forward', got {norm!r}")
    if norm not in _NORMS:
        raise InvalidUsageError(f"norm {norm!r}: expected 'backward', 'ortho' or 'forward'")
    # As the configurations' boolean fields: a string such as "False" is not taken as true.
    if not isinstance(transposed_out, bool | np.bool_):
        raise TypeError(f"transposed_out: expected a bool, got {transposed_out!r}")
    in_dtype, out_dtype = _dtypes(kind, dtype, ts)
    backends = _backend_list(backend)
    if config is not None and not isinstance(config, GridDescConfig):
        raise TypeError(f"config: expected a cudecomp.GridDescConfig, got {type(config).__name__}")
    (reps,) = _ints("autotune_reps", (autotune_reps,), 1, "an integer")
    if reps < 1:
        raise InvalidUsageError(f"autotune_reps {reps}: expected at least 1")
    w = None
    if workers is not None:
        (w,) = _ints("workers", (workers,), 1, "an integer or None")
        if w == 0:  # scipy.fft's meaning: > 0 threads, < 0 counted back from the CPU count
            raise InvalidUsageError("workers 0: expected a non-zero thread count (negative: os.cpu_count() + 1 + workers) or None")
    if comm is not None and not (hasattr(comm, "allreduce") and hasattr(comm, "size")):
        raise TypeError(f"comm: expected an mpi4py communicator or None, got {type(comm).__name__}")
    pd = None if p is None else (p[0], p[1])
    # str(): a numpy.str_ kind or norm is kept as the plain string it equals.
    k: Any = str(kind)
    n: Any = str(norm)
    return _PlanArgs((g[0], g[1], g[2]), pd, k, ts, n, bool(transposed_out), in_dtype, out_dtype, backends, config, reps, w, comm)


def _form(fields: int | None) -> str:
    """Name a transform's array form: one pencil, or a batch of ``fields`` fields."""
    return "one pencil" if fields is None else f"batch of {fields} fields"


@dataclass(frozen=True)
class _Call:
    """One transform's checked call: its stream handle (GPU; None on the CPU variant) and batch (None: one pencil)."""

    stream: int | None
    fields: int | None


def check_array(
    a: Any, info: Any, dtype: np.dtype, what: str, fields: int | None, writable: bool, *, xp: Any, gpu: bool, kind: str
) -> int | None:
    """Check one array of a transform on the plan's array module ``xp``; return its batch's field count (``None``: one pencil).

    ``fields``: the input's batch, which ``out`` must match; ``-1`` for the input
    itself, which may be either form.
    """
    if isinstance(a, (list, tuple)):
        raise TypeError(f"{what}: a batch of fields is one array of shape (k, *array_shape) (stack the fields), got a {type(a).__name__}")
    if not isinstance(a, xp.ndarray):
        lib = "CuPy" if gpu else "NumPy"
        raise TypeError(f"{what}: expected a {lib} array, got {type(a).__name__}")
    if a.dtype != dtype:
        raise TypeError(f"{what}: expected dtype {dtype} for this {kind} plan, got {a.dtype}")
    pencil = tuple(info.array_shape)
    shape = tuple(a.shape)
    got = shape[0] if len(shape) == 4 and shape[1:] == pencil else None
    if fields == -1:
        if shape != pencil and got is None:
            raise InvalidUsageError(
                f"{what}: expected shape {pencil} (this rank's pencil) or (k, *{pencil}) (a batch of k fields), got {shape}"
            )
    elif got != fields or (fields is None and shape != pencil):
        want = pencil if fields is None else (fields, *pencil)
        raise InvalidUsageError(f"{what}: expected shape {want} (the input's {_form(fields)}), got {shape}")
    if got is not None and got < 1:
        raise InvalidUsageError(f"{what}: a batch holds at least 1 field, got shape {shape}")
    if not a.flags.c_contiguous:
        raise InvalidUsageError(f"{what}: the array must be C-contiguous")
    if writable and not gpu and not a.flags.writeable:
        raise InvalidUsageError(f"{what}: the array must be writable")
    return got
