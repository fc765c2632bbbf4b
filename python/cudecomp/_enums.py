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


class DataType(enum.IntEnum):
    """Element type of the data an operation moves (``cudecompDataType_t``)."""

    FLOAT = -1
    DOUBLE = -2
    FLOAT_COMPLEX = -3
    DOUBLE_COMPLEX = -4


class TransposeCommBackend(enum.IntEnum):
    """Communication backend of the global transposes (``cudecompTransposeCommBackend_t``)."""

    MPI_P2P = 1
    MPI_P2P_PL = 2
    MPI_A2A = 3
    NCCL = 4
    NCCL_PL = 5
    NVSHMEM = 6
    NVSHMEM_PL = 7
    NVSHMEM_SM = 8
    #: Beyond upstream: ranks of one node pack their chunks straight into each other's
    #: workspaces (CPU: node-shared memory; GPU: CUDA IPC and the copy engine), pipelined
    #: in slices, with no MPI or NCCL data movement.
    DIRECT = 9


class HaloCommBackend(enum.IntEnum):
    """Communication backend of the halo updates (``cudecompHaloCommBackend_t``)."""

    MPI = 1
    MPI_BLOCKING = 2
    NCCL = 3
    NVSHMEM = 4
    NVSHMEM_BLOCKING = 5
    #: Beyond upstream: ranks of one node copy faces straight into their neighbours'
    #: workspaces (CPU: node-shared memory; GPU: CUDA IPC and the copy engine).
    DIRECT = 6


class AutotuneGridMode(enum.IntEnum):
    """Which communication the process-grid autotuner optimises."""

    TRANSPOSE = 0
    HALO = 1


class RankOrder(enum.IntEnum):
    """How ranks are laid onto the process grid."""

    DEFAULT = 0
    ROW_MAJOR = 1
    COL_MAJOR = 2


class Result(enum.IntEnum):
    """Result codes of the C API (``cudecompResult_t``), carried by every exception."""

    SUCCESS = 0
    INVALID_USAGE = 1
    NOT_SUPPORTED = 2
    INTERNAL_ERROR = 3
    CUDA_ERROR = 4
    CUTENSOR_ERROR = 5
    MPI_ERROR = 6
    NCCL_ERROR = 7
    NVSHMEM_ERROR = 8
    NVML_ERROR = 9
