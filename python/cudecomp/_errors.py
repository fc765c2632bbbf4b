"""Exceptions raised by cudecomp; each carries the matching C result code."""

from __future__ import annotations

from ._enums import Result

__all__ = [
    "CudaError",
    "CudecompError",
    "InternalError",
    "InvalidUsageError",
    "MpiError",
    "NcclError",
    "NotSupportedError",
    "NvshmemError",
]


class CudecompError(RuntimeError):
    """Base class of every cudecomp error; ``result`` is the C result code."""

    default_result: Result = Result.INTERNAL_ERROR
    """The result code of this class, used when none is given."""

    def __init__(self, message: str = "", result: Result | None = None) -> None:
        super().__init__(message)
        self.result: Result = self.default_result if result is None else Result(result)
        """The C API result code of this error."""


class InvalidUsageError(CudecompError, ValueError):
    """An argument or call sequence is wrong (``CUDECOMP_RESULT_INVALID_USAGE``)."""

    default_result = Result.INVALID_USAGE


class NotSupportedError(CudecompError, NotImplementedError):
    """A valid request this build or backend does not serve (``CUDECOMP_RESULT_NOT_SUPPORTED``)."""

    default_result = Result.NOT_SUPPORTED


class InternalError(CudecompError):
    """A broken internal invariant (``CUDECOMP_RESULT_INTERNAL_ERROR``)."""

    default_result = Result.INTERNAL_ERROR


class CudaError(CudecompError):
    """A CUDA driver or NVRTC failure (``CUDECOMP_RESULT_CUDA_ERROR``)."""

    default_result = Result.CUDA_ERROR


class MpiError(CudecompError):
    """An MPI failure (``CUDECOMP_RESULT_MPI_ERROR``)."""

    default_result = Result.MPI_ERROR


class NcclError(CudecompError):
    """An NCCL failure (``CUDECOMP_RESULT_NCCL_ERROR``)."""

    default_result = Result.NCCL_ERROR


class NvshmemError(CudecompError):
    """An NVSHMEM failure (``CUDECOMP_RESULT_NVSHMEM_ERROR``)."""

    default_result = Result.NVSHMEM_ERROR
