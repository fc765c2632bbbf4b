"""What the parts of the benchmark share: the tables of dtypes and operations, the row, the grid configuration."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

import cudecomp
from cudecomp import DataType, HaloCommBackend, TransposeCommBackend

DTYPES = {"f32": DataType.FLOAT, "f64": DataType.DOUBLE, "c64": DataType.FLOAT_COMPLEX, "c128": DataType.DOUBLE_COMPLEX}


NP_DTYPES = {
    DataType.FLOAT: np.float32,
    DataType.DOUBLE: np.float64,
    DataType.FLOAT_COMPLEX: np.complex64,
    DataType.DOUBLE_COMPLEX: np.complex128,
}


MPI_TYPES = {
    DataType.FLOAT: MPI.FLOAT,
    DataType.DOUBLE: MPI.DOUBLE,
    DataType.FLOAT_COMPLEX: MPI.C_FLOAT_COMPLEX,
    DataType.DOUBLE_COMPLEX: MPI.C_DOUBLE_COMPLEX,
}


OPS = {
    "xy": ("transpose_x_to_y", 0, 1),
    "yz": ("transpose_y_to_z", 1, 2),
    "zy": ("transpose_z_to_y", 2, 1),
    "yx": ("transpose_y_to_x", 1, 0),
    "xz": ("transpose_x_to_z", 0, 2),
    "zx": ("transpose_z_to_x", 2, 0),
}

#: The operations timed by default: upstream's four transposes (and ``halo``).
DEFAULT_OPS = ("xy", "yz", "zy", "yx")


HALO_OPS = ("halo", "hx", "hy", "hz")


#: ``--ops fft`` times a cudecomp.fft plan: rows ``fft`` (forward) and ``ifft`` (backward), with
#: ``-natural`` appended where the spectral output returns to the input's pencil.
FFT_OPS = ("fft", "ifft")


OP_TITLES = {
    "xy": "X→Y",
    "yz": "Y→Z",
    "zy": "Z→Y",
    "yx": "Y→X",
    "xz": "X→Z",
    "zx": "Z→X",
    "rd-xy": "redistribution X→Y",
    "rd-xz": "X→Z in one exchange",
    "rd-grid": "new process grid",
    "rd-brick": "bricks → X-pencils",
    "io-write": "one-file write",
    "io-read": "one-file read",
    "halo": "halo x,y,z",
    "hx": "halo x",
    "hy": "halo y",
    "hz": "halo z",
    "fft": "forward FFT",
    "ifft": "backward FFT",
}


#: Short names of the ceilings in the printed table.
CEILING_TAGS = {
    "peer_copy": "peer",
    "device_copy": "dev",
    "host_copy": "host",
    "device_copy_same_data": "dev-same",
    "host_copy_same_data": "host-same",
}


@dataclass
class Row:
    """One measured configuration.

    ``gbps_per_rank`` counts, per rank, the bytes that leave the rank (distributed
    operations) or the bytes of the data copied (local ones), over the slowest rank's
    median time, averaged over ranks; ``pct_of_ceiling`` compares it with the ceiling
    named by ``ceiling`` (NaN where none applies). Fields are only ever added (at the
    end), never removed, so that older JSON and CSV readers keep working.
    """

    op: str
    gdims: tuple[int, int, int]
    pdims: tuple[int, int]
    backend: str
    dtype: str
    axis_contiguous: bool
    halo: tuple[int, int, int] = (0, 0, 0)
    ms: float = math.nan
    ms_min: float = math.nan
    gbps_per_rank: float = math.nan
    bytes_off_rank: int = 0
    ceiling_gbps: float = math.nan
    pct_of_ceiling: float = math.nan
    baseline: dict[str, float] = field(default_factory=dict)
    note: str = ""
    #: True when bytes leave some rank (else a local copy, permutation or periodic wrap).
    distributed: bool = False
    #: Which ceiling ``ceiling_gbps`` is: ``peer_copy``, ``device_copy``, ``host_copy``
    #: (run-wide, distributed operations), ``device_copy_same_data`` or
    #: ``host_copy_same_data`` (local operations), or "" (none applies).
    ceiling: str = ""
    #: Bytes per rank that ``gbps_per_rank`` counts (the most of any rank).
    bytes_per_rank: int = 0


def pct_of(gbps: float, ceiling: float) -> float:
    """``gbps`` as a percentage of ``ceiling``; NaN when the ceiling is unknown."""
    if not (math.isfinite(ceiling) and ceiling > 0 and math.isfinite(gbps)):
        return math.nan
    return 100 * gbps / ceiling


@dataclass(frozen=True)
class Case:
    """One global grid, process grid and element type of the sweep."""

    gdims: tuple[int, int, int]
    pdims: tuple[int, int]
    dname: str

    @property
    def dtype(self) -> DataType:
        """The element type as a ``cudecomp.DataType``."""
        return DTYPES[self.dname]

    @property
    def np_dtype(self) -> Any:
        """The element type as a NumPy type."""
        return NP_DTYPES[self.dtype]

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return cudecomp.get_data_type_size(self.dtype)

    def row(self, op: str, backend: str, ac: bool, **kw: Any) -> Row:
        """Return a row naming operation ``op`` of this case on ``backend``, layout ``ac`` (``kw``: further fields)."""
        return Row(op, self.gdims, self.pdims, backend, self.dname, ac, **kw)


def config(
    gdims: tuple[int, int, int],
    pdims: tuple[int, int],
    backend: TransposeCommBackend,
    ac: bool,
    halo_backend: HaloCommBackend = HaloCommBackend.MPI,
) -> cudecomp.GridDescConfig:
    """Build a grid configuration (the same axis-contiguity for all three pencils)."""
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = gdims, pdims
    cfg.transpose_comm_backend = backend
    cfg.halo_comm_backend = halo_backend
    cfg.transpose_axis_contiguous = (ac, ac, ac)
    return cfg
