"""Enumerations of the cuDecomp C API, with the C values."""

from __future__ import annotations

import enum

__all__ = [
    "AutotuneGridMode",
    "DataType",
    "HaloCommBackend",
    "RankOrder",
    "Result",
    "TransposeCommBackend",
]


class _Enum(enum.IntEnum):
    """An IntEnum whose members print as their names.

    ``str(RankOrder.ROW_MAJOR)`` and ``f"{RankOrder.ROW_MAJOR}"`` give ``"ROW_MAJOR"``, as
    logs are read; numeric format specs (``f"{x:d}"``) still format the value.
    """

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return self.name.__format__(spec) if not spec or spec[-1] not in "bcdoxXneEfFgG%" else int(self).__format__(spec)


class DataType(_Enum):
    """Element type of the data an operation moves (``cudecompDataType_t``)."""

    FLOAT = -1
    """32-bit floats (NumPy ``float32``), 4 bytes."""
    DOUBLE = -2
    """64-bit floats (NumPy ``float64``), 8 bytes."""
    FLOAT_COMPLEX = -3
    """Complex numbers of two 32-bit floats (NumPy ``complex64``), 8 bytes."""
    DOUBLE_COMPLEX = -4
    """Complex numbers of two 64-bit floats (NumPy ``complex128``), 16 bytes."""


class TransposeCommBackend(_Enum):
    """Communication backend of the global transposes (``cudecompTransposeCommBackend_t``)."""

    MPI_P2P = 1
    """MPI point-to-point messages to every peer at once (both variants)."""
    MPI_P2P_PL = 2
    """MPI point-to-point messages, exchanged peer by peer (pipelined; both variants)."""
    MPI_A2A = 3
    """One MPI ``Alltoall``/``Alltoallv`` (both variants)."""
    NCCL = 4
    """NCCL send/receive groups, pipelined in slices (GPU variant; one GPU per rank)."""
    NCCL_PL = 5
    """NCCL, additionally stepping peer by peer (GPU variant; one GPU per rank)."""
    NVSHMEM = 6
    """NVSHMEM puts into peers' symmetric workspaces, each signalled (GPU variant; one GPU per rank)."""
    NVSHMEM_PL = 7
    """As ``NVSHMEM``, stepping peer by peer (GPU variant; one GPU per rank)."""
    NVSHMEM_SM = 8
    """NVSHMEM with chunks packed by copy kernels straight into peers' memory (GPU variant; one GPU per rank)."""
    DIRECT = 9
    """Beyond upstream: ranks of one node pack their chunks straight into each other's
    workspaces (CPU: node-shared memory; GPU: CUDA IPC and the copy engine), pipelined in
    slices, with no MPI or NCCL data movement."""


class HaloCommBackend(_Enum):
    """Communication backend of the halo updates (``cudecompHaloCommBackend_t``)."""

    MPI = 1
    """Non-blocking MPI sends and receives to both neighbours at once (both variants)."""
    MPI_BLOCKING = 2
    """MPI, one direction at a time with blocking sends (both variants)."""
    NCCL = 3
    """One NCCL send/receive group (GPU variant; one GPU per rank)."""
    NVSHMEM = 4
    """Faces put into the neighbours' symmetric workspaces through NVSHMEM (GPU variant; one GPU per rank)."""
    NVSHMEM_BLOCKING = 5
    """As ``NVSHMEM``, whole faces without slices (GPU variant; one GPU per rank)."""
    DIRECT = 6
    """Beyond upstream: ranks of one node copy faces straight into their neighbours'
    workspaces (CPU: node-shared memory; GPU: CUDA IPC and the copy engine)."""


class AutotuneGridMode(_Enum):
    """Which communication the process-grid autotuner optimises."""

    TRANSPOSE = 0
    """Choose the process grid by the time of the transposes."""
    HALO = 1
    """Choose the process grid by the time of the halo updates."""


class RankOrder(_Enum):
    """How ranks are laid onto the process grid."""

    DEFAULT = 0
    """Row-major, unless ``CUDECOMP_USE_COL_MAJOR_RANK_ORDER=1`` is set (then column-major)."""
    ROW_MAJOR = 1
    """Consecutive ranks share a process-grid row: ``row = rank // P_cols``, ``col = rank % P_cols``."""
    COL_MAJOR = 2
    """Consecutive ranks share a process-grid column: ``row = rank % P_rows``, ``col = rank // P_rows``."""


class Result(_Enum):
    """Result codes of the C API (``cudecompResult_t``), carried by every exception."""

    SUCCESS = 0
    """No error."""
    INVALID_USAGE = 1
    """A wrong argument or call sequence (``InvalidUsageError``)."""
    NOT_SUPPORTED = 2
    """A valid request this build, backend or machine does not serve (``NotSupportedError``)."""
    INTERNAL_ERROR = 3
    """A broken internal invariant (``InternalError``)."""
    CUDA_ERROR = 4
    """A CUDA driver or NVRTC failure (``CudaError``)."""
    CUTENSOR_ERROR = 5
    """A cuTENSOR failure (upstream only: this implementation does not use cuTENSOR)."""
    MPI_ERROR = 6
    """An MPI failure (``MpiError``)."""
    NCCL_ERROR = 7
    """An NCCL failure (``NcclError``)."""
    NVSHMEM_ERROR = 8
    """An NVSHMEM failure (``NvshmemError``)."""
    NVML_ERROR = 9
    """An NVML failure (upstream only: this implementation does not use NVML)."""
