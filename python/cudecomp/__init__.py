"""cudecomp: slab and pencil decompositions of 3-D grids over MPI ranks.

Global transposes (X->Y, Y->Z, Z->Y, Y->X) and halo updates on NumPy arrays (CPU
variant) or CUDA arrays (GPU variant), with the Python API of NVIDIA cuDecomp and a
Rust core. See ``Handle``, ``GridDescConfig`` and ``GridDesc``; distributed 3-D FFTs
built on the transposes are in ``cudecomp.fft``.
"""

from __future__ import annotations

from . import _cudecomp, fft
from ._autotune import AutotuneResult, AutotuneTrial
from ._config import GridDescAutotuneOptions, GridDescConfig
from ._cudecomp import BoxLayout, GridDesc, Handle, PencilInfo, PencilLayout, Redistribution
from ._enums import AutotuneGridMode, DataType, HaloCommBackend, RankOrder, Result, TransposeCommBackend
from ._errors import (
    CudaError,
    CudecompError,
    InternalError,
    InvalidUsageError,
    MpiError,
    NcclError,
    NotSupportedError,
    NvshmemError,
)
from ._log import log_to_root

CPU_ONLY: bool = bool(_cudecomp.CPU_ONLY)
"""True in the CPU variant (NumPy arrays), False in the GPU variant (CUDA arrays)."""

__version__: str = _cudecomp.VERSION + ("+cpu" if CPU_ONLY else "")
"""The package version; the CPU variant's ends in ``+cpu``.

Equal to the installed distribution's ``importlib.metadata.version("cudecomp")``: both are
Cargo.toml's version, and the build backend gives the CPU variant's wheel the same ``+cpu``
label from the same ``CUDECOMP_BUILD_CPU_ONLY`` that compiled this module.
"""


def transpose_comm_backend_to_string(backend: TransposeCommBackend) -> str:
    """Upstream's display name of a transpose backend (``"ERROR"`` for unknown values)."""
    return _cudecomp.transpose_comm_backend_to_string(_enum_value(backend, "backend"))


def halo_comm_backend_to_string(backend: HaloCommBackend) -> str:
    """Upstream's display name of a halo backend (``"ERROR"`` for unknown values)."""
    return _cudecomp.halo_comm_backend_to_string(_enum_value(backend, "backend"))


def get_data_type_size(dtype: DataType) -> int:
    """Size in bytes of one element of ``dtype``."""
    if not isinstance(dtype, DataType):
        raise TypeError(f"dtype: expected a cudecomp.DataType member, got {dtype!r}")
    return int(_cudecomp.get_data_type_size(int(dtype)))


def _enum_value(v: object, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name}: expected a backend enum member or int, got {v!r}")
    return int(v)


__all__ = [
    "CPU_ONLY",
    "AutotuneGridMode",
    "AutotuneResult",
    "AutotuneTrial",
    "BoxLayout",
    "CudaError",
    "CudecompError",
    "DataType",
    "GridDesc",
    "GridDescAutotuneOptions",
    "GridDescConfig",
    "HaloCommBackend",
    "Handle",
    "InternalError",
    "InvalidUsageError",
    "MpiError",
    "NcclError",
    "NotSupportedError",
    "NvshmemError",
    "PencilInfo",
    "PencilLayout",
    "RankOrder",
    "Redistribution",
    "Result",
    "TransposeCommBackend",
    "__version__",
    "fft",
    "get_data_type_size",
    "halo_comm_backend_to_string",
    "log_to_root",
    "transpose_comm_backend_to_string",
]
