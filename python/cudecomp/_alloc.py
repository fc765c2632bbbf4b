"""Allocation of pencil arrays (``GridDesc.empty_pencil`` / ``zeros_pencil``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._enums import DataType

__all__ = ["allocate", "device_view_of", "numpy_dtype", "view_of"]

_NAMES = {
    DataType.FLOAT: "float32",
    DataType.DOUBLE: "float64",
    DataType.FLOAT_COMPLEX: "complex64",
    DataType.DOUBLE_COMPLEX: "complex128",
}


def numpy_dtype(dtype: Any) -> np.dtype:
    """Return the NumPy dtype of an allocation: a ``DataType`` member or one of the four NumPy dtypes."""
    if isinstance(dtype, DataType):
        return np.dtype(_NAMES[dtype])
    if isinstance(dtype, bool) or dtype is None or isinstance(dtype, int):
        raise TypeError(f"dtype: expected a cudecomp.DataType member or a NumPy dtype, got {dtype!r}")
    try:
        d = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"dtype: expected a cudecomp.DataType member or a NumPy dtype, got {dtype!r}") from e
    if d.name not in _NAMES.values() or not d.isnative:
        raise TypeError(f"dtype: expected float32, float64, complex64 or complex128 (native byte order), got {d}")
    return d


def allocate(shape: tuple[int, ...], dtype: Any, zero: bool, cpu_only: bool) -> Any:
    """Allocate a C-contiguous array of ``shape``: NumPy (CPU variant) or CuPy on the current device."""
    d = numpy_dtype(dtype)
    if cpu_only:
        return np.zeros(shape, d) if zero else np.empty(shape, d)
    try:
        import cupy
    except ImportError as e:
        raise TypeError("empty_pencil: the GPU variant allocates CuPy arrays, but CuPy cannot be imported") from e
    return cupy.zeros(shape, d) if zero else cupy.empty(shape, d)


def view_of(owner: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Return a C-contiguous ``shape`` array of ``dtype`` over ``owner``'s bytes (kept alive as its base)."""
    n = int(np.prod(shape))
    return np.asarray(owner).view(dtype)[:n].reshape(shape)


def device_view_of(owner: Any, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """Return a C-contiguous CuPy ``shape`` array of ``dtype`` over ``owner``'s device bytes (kept alive by CuPy)."""
    import cupy

    mem = cupy.cuda.UnownedMemory(owner.ptr, owner.nbytes, owner, owner.device)
    return cupy.ndarray(shape, np.dtype(dtype), cupy.cuda.MemoryPointer(mem, 0))
