"""CuPy glue for the GPU variant: raw stream handles as CuPy streams, output allocation on the operation's stream."""

from __future__ import annotations

from typing import Any

__all__ = ["empty_on_stream", "external_stream", "from_dlpack"]


class _StreamRef:
    """A raw stream handle exposed through the CUDA stream protocol."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)


def external_stream(ptr: int) -> Any:
    """Return a CuPy stream object for the raw handle ``ptr`` (not owned: never destroyed by CuPy)."""
    import cupy

    from_external = getattr(cupy.cuda.Stream, "from_external", None)  # CuPy >= 14; ExternalStream before
    return from_external(_StreamRef(ptr)) if from_external else cupy.cuda.ExternalStream(ptr)


def empty_on_stream(shape: tuple[int, ...], dtype: str, stream: int) -> Any:
    """``cupy.empty`` from CuPy's default pool, allocated on stream ``stream``."""
    import cupy

    if cupy.cuda.get_current_stream().ptr == stream:
        return cupy.empty(shape, dtype)
    with external_stream(stream):
        return cupy.empty(shape, dtype)


def from_dlpack(obj: Any) -> Any:
    """Return a zero-copy CuPy view of a CUDA array exported through DLPack (JAX, ...)."""
    import cupy

    return cupy.from_dlpack(obj)
