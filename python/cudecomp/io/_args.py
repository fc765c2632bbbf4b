"""The arguments of ``cudecomp.io`` calls, checked on each rank before the ranks meet.

Everything here is local and raises the error the caller's rank reports: ``TypeError``
for arguments of the wrong Python type, ``InvalidUsageError`` for values out of range.
What must be alike on every rank is returned as text (``fields``) for the call's
settlement, attributes as digests of their bytes (never their printed form, which NumPy
shortens).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._cudecomp import BoxLayout, Handle, PencilInfo, PencilLayout
from .._errors import InvalidUsageError

DTYPES = tuple(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128"))
"""The element types of the package's arrays (what fields are written and read as)."""

MAX_STEP = 10**10 - 1
"""The largest step: steps are stored zero-padded to 10 digits, so that names sort in order."""

OWN_ATTRS = ("cudecomp_complete", "cudecomp_format", "gdims", "axes")
"""Attribute names the package keeps for itself (at the root; a step's group keeps the first)."""


@dataclass(frozen=True)
class Target:
    """Where the call's cells live on this rank: the handle, the global grid, this rank's array."""

    handle: Handle
    gdims: tuple[int, int, int]
    info: PencilInfo
    #: What every rank must give alike about the layout, as text.
    described: str


def path_arg(path: Any) -> str:
    """Return the path as a string (``TypeError`` unless path-like)."""
    try:
        return os.fspath(path)
    except TypeError:
        raise TypeError(f"path: expected a str or os.PathLike, got {type(path).__name__}") from None


def handle_of(layout: Any, handle: Any) -> Handle:
    """Return the handle the call runs on: the pencil's grid's, or ``handle=`` for a box (local, before any collective)."""
    if isinstance(layout, PencilLayout):
        return layout.grid.handle
    if isinstance(layout, BoxLayout):
        if not isinstance(handle, Handle):
            got = "none" if handle is None else type(handle).__name__
            raise TypeError(f"handle: a BoxLayout needs handle= (a cudecomp.Handle) and gdims=, got {got}")
        return handle
    raise TypeError(f"layout: expected a cudecomp.PencilLayout (GridDesc.pencil) or a cudecomp.BoxLayout, got {type(layout).__name__}")


def target(layout: PencilLayout | BoxLayout, handle: Handle, gdims: Any) -> Target:
    """Describe this rank's side of ``layout`` (checked locally)."""
    if isinstance(layout, PencilLayout):
        g = layout.grid
        dims = tuple(int(v) for v in g.config.gdims)
        info = g.get_pencil_info(layout.axis, layout.halo_extents, layout.padding)
        pdims = tuple(g.config.pdims)
        described = (
            f"the {'XYZ'[layout.axis]}-pencil of a grid of pdims {pdims}, halo_extents {layout.halo_extents}, padding {layout.padding}"
        )
        return Target(handle, dims, info, described)  # type: ignore[arg-type]
    if gdims is None:
        raise TypeError("gdims: a BoxLayout needs gdims= (the global extents X, Y, Z), got none")
    try:
        dims = tuple(int(v) for v in gdims)
    except TypeError:
        raise TypeError(f"gdims: expected 3 ints, got {type(gdims).__name__}") from None
    if len(dims) != 3 or any(n < 1 for n in dims):
        raise InvalidUsageError(f"gdims: expected 3 positive extents (X, Y, Z), got {dims}")
    return Target(handle, dims, layout.info, "boxes")  # type: ignore[arg-type]


def step_arg(step: Any) -> int | None:
    """``None`` or a step number in 0 ..= ``MAX_STEP``."""
    if step is None:
        return None
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"step: expected an int or None, got {type(step).__name__}")
    if not 0 <= int(step) <= MAX_STEP:
        raise InvalidUsageError(f"step: expected 0 <= step <= {MAX_STEP} (steps are stored with 10 digits), got {int(step)}")
    return int(step)


def field_names(fields: Any) -> list[str]:
    """Return the names of ``fields`` (a non-empty mapping of names without '/')."""
    if not isinstance(fields, Mapping):
        raise TypeError(f"fields: expected a mapping of name -> array, got {type(fields).__name__}")
    names = list(fields)
    if not names:
        raise InvalidUsageError("fields: expected at least one field, got none")
    for n in names:
        if not isinstance(n, str) or not n or "/" in n or n.startswith("."):
            raise InvalidUsageError(f"fields: expected names that are non-empty strings without '/' and not starting with '.', got {n!r}")
    return names


def supported_dtype(what: str, dtype: Any) -> np.dtype:
    """``dtype`` as one of ``DTYPES`` (``InvalidUsageError`` naming ``what`` otherwise)."""
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{what}: expected a NumPy dtype, got {dtype!r}") from None
    if d.newbyteorder("=") not in DTYPES or not d.isnative:
        names = ", ".join(t.name for t in DTYPES)
        raise InvalidUsageError(f"{what}: expected one of {names} (native byte order), got {d.str} ({d.name})")
    return d.newbyteorder("=")


def check_array(handle: Handle, what: str, a: Any, shape: tuple[int, ...], writable: bool, stream: Any) -> tuple[np.dtype, int | None]:
    """Check one rank's array of the call (shape, element type, what the data path takes).

    Returns its dtype and its batch: ``None`` for the layout's array, ``k`` for a batch
    of ``k`` fields (shape ``(k, *shape)``).
    """
    if isinstance(a, (list, tuple)):
        raise TypeError(f"{what}: a batch of fields is one array of shape (k, *array_shape) (stack the fields), got a {type(a).__name__}")
    if not hasattr(a, "shape") or not hasattr(a, "dtype"):
        raise TypeError(f"{what}: expected an array, got {type(a).__name__}")
    got, want = tuple(a.shape), tuple(shape)
    if got != want and not (len(got) == len(want) + 1 and got[1:] == want):
        raise InvalidUsageError(
            f"{what}: expected shape {want} (the layout's array_shape) or (k, *{want}) (a batch of k fields), got {got}"
        )
    fields = got[0] if got != want else None
    if fields is not None and fields < 1:
        raise InvalidUsageError(f"{what}: a batch holds at least 1 field, got shape {got}")
    d = supported_dtype(f"{what} dtype", a.dtype)
    try:
        handle._check_array(a, writable, stream)
    except (InvalidUsageError, TypeError) as e:
        raise type(e)(f"{what}: {e}") from None
    return d, fields


def _attribute(key: str, value: Any) -> Any:
    """``value`` as HDF5 stores it: a number, string, bytes or array of them (``InvalidUsageError`` otherwise)."""
    if isinstance(value, (str, bytes)):
        return value
    try:
        arr = np.asarray(value)
    except Exception:  # ragged sequences and the like
        arr = np.asarray(None)
    if arr.dtype.kind in "biufc":
        return arr if arr.ndim else arr[()]
    if arr.dtype.kind == "U" or (arr.dtype.kind == "O" and arr.size and all(isinstance(v, str) for v in arr.flat)):
        import h5py  # type: ignore[import-untyped]

        return np.array([str(v) for v in arr.flat], dtype=h5py.string_dtype()).reshape(arr.shape)
    expected = "a number, string, bytes or array of numbers or strings"
    raise InvalidUsageError(f"attrs[{key!r}]: expected {expected}, got {type(value).__name__} {value!r:.60}")


def attributes(attrs: Any, reserved: tuple[str, ...]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Return the attributes to store, and one field per attribute (its type, shape and a digest of its bytes)."""
    if attrs is None:
        return {}, []
    if not isinstance(attrs, Mapping):
        raise TypeError(f"attrs: expected a mapping of name -> value, got {type(attrs).__name__}")
    stored: dict[str, Any] = {}
    fields: list[tuple[str, str]] = []
    for key in sorted(attrs, key=lambda k: (not isinstance(k, str), str(k))):
        if not isinstance(key, str) or not key:
            raise InvalidUsageError(f"attrs: expected non-empty string names, got {key!r}")
        if key in reserved:
            raise InvalidUsageError(f"attrs[{key!r}]: the name is the package's own ({', '.join(reserved)})")
        v = _attribute(key, attrs[key])
        stored[key] = v
        fields.append((f"attrs[{key!r}]", _digest(v)))
    return stored, fields


def _digest(v: Any) -> str:
    """Describe a value by its type, shape and a digest of its bytes: equal exactly when the stored values are."""
    if isinstance(v, str):
        raw, kind = v.encode(), "str"
    elif isinstance(v, bytes):
        raw, kind = v, "bytes"
    else:
        arr = np.asarray(v)
        if arr.dtype.kind == "O":
            raw, kind = "\0".join(str(s) for s in arr.flat).encode(), f"strings {arr.shape}"
        else:
            raw, kind = np.ascontiguousarray(arr).tobytes(), f"{arr.dtype.str} {arr.shape}"
    return f"{kind} sha256:{hashlib.sha256(raw).hexdigest()[:32]}"
