"""The global-index oracle of DESIGN §7: interior cells hold their global linear index
``x + X*(y + Y*z)`` (complex: ``(i, -i)``), halo and padding cells a sentinel."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence

import numpy as np

import cudecomp

NUMPY_DTYPES = {
    cudecomp.DataType.FLOAT: np.float32,
    cudecomp.DataType.DOUBLE: np.float64,
    cudecomp.DataType.FLOAT_COMPLEX: np.complex64,
    cudecomp.DataType.DOUBLE_COMPLEX: np.complex128,
}
SENTINEL = -7.0

if cudecomp.CPU_ONLY:
    xp = np

    def to_host(a: np.ndarray) -> np.ndarray:
        """The array as NumPy (identity in the CPU variant)."""
        return a
else:  # pragma: no cover - GPU variant
    try:
        import cupy as xp  # type: ignore[import-not-found,no-redef]
    except ImportError:  # GPU variant without CuPy: data-path tests skip
        xp = np

    def to_host(a: np.ndarray) -> np.ndarray:
        """The array as NumPy (copied from the device)."""
        return xp.asnumpy(a) if xp is not np else a


def device(a: np.ndarray) -> np.ndarray:
    """The array in the variant's memory (NumPy or CuPy)."""
    return xp.asarray(a)


def local_gpu_count() -> int:
    """GPUs visible to this process (0 in the CPU variant)."""
    if cudecomp.CPU_ONLY or xp is np:
        return 0
    try:
        return int(xp.cuda.runtime.getDeviceCount())
    except Exception:  # no driver
        return 0


def nccl_usable() -> bool:
    """NCCL needs one GPU per rank on each node."""
    from mpi4py import MPI

    if cudecomp.CPU_ONLY:
        return False
    local = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    ok = local.size <= local_gpu_count()
    local.Free()
    return ok


_USABLE: dict[str, bool] = {}


def _creates_grid(backend: cudecomp.TransposeCommBackend, precondition: Callable[[], bool]) -> bool:
    """Collective (first call per backend): whether ``precondition()`` holds and a small grid
    on ``backend`` can then be created here; cached."""
    from mpi4py import MPI

    if backend.name not in _USABLE:
        ok = precondition()
        if ok:
            with cudecomp.Handle(MPI.COMM_WORLD) as h:
                cfg = cudecomp.GridDescConfig()
                cfg.gdims, cfg.pdims = (4, 4, 4), (MPI.COMM_WORLD.size, 1)
                cfg.transpose_comm_backend = backend
                try:
                    h.create_grid(cfg).destroy()
                except cudecomp.NotSupportedError:
                    ok = False
        _USABLE[backend.name] = ok
    return _USABLE[backend.name]


def direct_usable() -> bool:
    """Collective (first call): whether the DIRECT backend works here (one node; CPU variant:
    node-shared memory; GPU variant: a GPU)."""
    return _creates_grid(cudecomp.TransposeCommBackend.DIRECT, lambda: cudecomp.CPU_ONLY or local_gpu_count() > 0)


def nvshmem_usable() -> bool:
    """Collective (first call): whether the NVSHMEM backends work here (GPU variant, one GPU
    per rank, NVSHMEM's host library)."""
    return _creates_grid(cudecomp.TransposeCommBackend.NVSHMEM, nccl_usable)


def variant_transpose_backends() -> list[cudecomp.TransposeCommBackend]:
    """Transpose backends this variant and machine can run."""
    b = cudecomp.TransposeCommBackend
    out = [b.MPI_P2P, b.MPI_P2P_PL, b.MPI_A2A]
    if nccl_usable():
        out += [b.NCCL, b.NCCL_PL]
    if direct_usable():
        out.append(b.DIRECT)
    if nvshmem_usable():
        out += [b.NVSHMEM, b.NVSHMEM_PL, b.NVSHMEM_SM]
    return out


def variant_halo_backends() -> list[cudecomp.HaloCommBackend]:
    """Halo backends this variant and machine can run."""
    b = cudecomp.HaloCommBackend
    out = [b.MPI, b.MPI_BLOCKING]
    if nccl_usable():
        out.append(b.NCCL)
    if direct_usable():
        out.append(b.DIRECT)
    if nvshmem_usable():
        out += [b.NVSHMEM, b.NVSHMEM_BLOCKING]
    return out


def global_index(info: cudecomp.PencilInfo, gdims: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Global linear index of every cell of a pencil array, and the interior mask."""
    k, j, i = np.indices(info.array_shape, dtype=np.int64)
    pos = (i, j, k)
    g: list[np.ndarray] = [np.empty(0)] * 3
    inside = np.ones(info.array_shape, dtype=bool)
    for p in range(3):
        ax = info.order[p]
        g[ax] = pos[p] + info.lo[p] - info.halo_extents[ax]
        inside &= (g[ax] >= info.lo[p]) & (g[ax] <= info.hi[p])
    return g[0] + gdims[0] * (g[1] + gdims[1] * g[2]), inside


def make(info: cudecomp.PencilInfo, gdims: Sequence[int], dtype: cudecomp.DataType, sentinel: float = SENTINEL) -> np.ndarray:
    """A pencil array filled with the oracle."""
    idx, inside = global_index(info, gdims)
    a = np.full(info.array_shape, sentinel, dtype=NUMPY_DTYPES[dtype])
    v = idx[inside]
    a[inside] = v - 1j * v if np.iscomplexobj(a) else v
    return a


def interior(info: cudecomp.PencilInfo) -> np.ndarray:
    """Mask of the owned interior."""
    return global_index(info, (1, 1, 1))[1]


def factor_pairs(n: int) -> list[tuple[int, int]]:
    """Every process grid of ``n`` ranks."""
    return [(r, n // r) for r in range(1, n + 1) if n % r == 0]


ALL_CONTIGUOUS = [tuple(bool(b) for b in c) for c in itertools.product([False, True], repeat=3)]


def permutations() -> Iterator[tuple[int, int, int]]:
    """The six memory orders."""
    return itertools.permutations(range(3))  # type: ignore[return-value]
