"""Which local FFTs and transposes run on a process grid, and the pencil layouts they need."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from .._config import GridDescConfig
from .._cudecomp import CPU_ONLY
from .._enums import TransposeCommBackend
from ._gpu import FftSettings

Schedule = Literal["local", "slab-xy", "slab-yz", "pencil"]
"""Which sequence of local FFTs and transposes runs (see the `cudecomp.fft` documentation)."""

# Memory order (global axes, fastest first) of the X-, Y- and Z-pencils per schedule. Every
# pencil an FFT runs on has its transformed axes fastest; pencils that hold the same data
# (X and Y with P_rows == 1, Y and Z with P_cols == 1) share one layout, so that the
# array of one is passed as the other and no local transpose runs.
_MEM_ORDER: dict[str, tuple[tuple[int, int, int], ...]] = {
    "local": ((0, 1, 2), (0, 1, 2), (0, 1, 2)),
    "slab-xy": ((0, 1, 2), (0, 1, 2), (2, 0, 1)),
    "slab-yz": ((0, 1, 2), (1, 2, 0), (1, 2, 0)),
    "pencil": ((0, 1, 2), (1, 2, 0), (2, 0, 1)),
}


# The slab-xy schedule on GPUs with DIRECT streams its 2-D FFTs into the exchange (see
# `_SlabStream`): every pencil keeps X fastest, so each rank's chunk for a peer is whole
# (Y, X) planes the copy engine moves without any SM, beside the FFT of the next slab.
_STREAMED_ORDER = ((0, 1, 2), (0, 1, 2), (0, 1, 2))


def _streams_slabs(cfg: GridDescConfig, settings: FftSettings, own_gpus: Callable[[], bool]) -> bool:
    """Whether a plan on grid configuration ``cfg`` streams its slabs.

    GPU variant, slab-xy, DIRECT, and each rank on a GPU of its own (``own_gpus``, asked
    last: collective) unless ``CUDECOMP_FFT_STREAM=1`` asks for it anyway; ``0`` turns it
    off. Ranks sharing a GPU gain nothing from it (the copy engine and SMs are the same
    ones).
    """
    pr, pc = (int(v) for v in cfg.pdims)
    backend = TransposeCommBackend(int(cfg.transpose_comm_backend))
    setting = settings.stream
    if setting == "0" or CPU_ONLY or pr != 1 or pc < 2 or backend != TransposeCommBackend.DIRECT:
        return False
    return setting == "1" or own_gpus()


def schedule_of(pdims: Sequence[int]) -> Schedule:
    """Return the schedule an FFT runs on the process grid ``pdims = (P_rows, P_cols)``.

    ``local`` on one rank, ``slab-xy`` when ``P_rows == 1``, ``slab-yz`` when
    ``P_cols == 1``, ``pencil`` otherwise.
    """
    pr, pc = int(pdims[0]), int(pdims[1])
    if pr == 1 and pc == 1:
        return "local"
    if pr == 1:
        return "slab-xy"
    if pc == 1:
        return "slab-yz"
    return "pencil"


def _usable(gdims: Sequence[int], spectral_x: int, pdims: Sequence[int]) -> bool:
    """Whether every pencil the schedule touches is non-empty on every rank."""
    y, z = int(gdims[1]), int(gdims[2])
    pr, pc = int(pdims[0]), int(pdims[1])
    s = schedule_of(pdims)
    if s == "local":
        return True
    if s == "slab-xy":
        return z >= pc and y >= pc
    if s == "slab-yz":
        return y >= pr and spectral_x >= pr
    return y >= pr and z >= pc and spectral_x >= pr and y >= pc


def _factor_pairs(n: int) -> list[tuple[int, int]]:
    return [(r, n // r) for r in range(1, n + 1) if n % r == 0]
