"""The suites' shared oracles and helpers.

The global-index oracle of DESIGN §7: interior cells hold their global linear index
``x + X*(y + Y*z)`` (complex: ``(i, -i)``), halo and padding cells a sentinel; the halo
oracle (cells after an update); the FFT checks against numpy.fft on gathered global
arrays; and which backends this machine can run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp

if TYPE_CHECKING:
    from cudecomp.fft import FFT

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


#: Every transpose of a grid: its ``GridDesc`` method and the pencils it goes from and to.
TRANSPOSES = [
    ("transpose_x_to_y", 0, 1),
    ("transpose_y_to_z", 1, 2),
    ("transpose_z_to_y", 2, 1),
    ("transpose_y_to_x", 1, 0),
    ("transpose_x_to_z", 0, 2),
    ("transpose_z_to_x", 2, 0),
]


def factor_pairs(n: int) -> list[tuple[int, int]]:
    """Every process grid of ``n`` ranks."""
    return [(r, n // r) for r in range(1, n + 1) if n % r == 0]


ALL_CONTIGUOUS = [tuple(bool(b) for b in c) for c in itertools.product([False, True], repeat=3)]


def permutations() -> Iterator[tuple[int, int, int]]:
    """The six memory orders."""
    return itertools.permutations(range(3))  # type: ignore[return-value]


# Halo updates


def halo_expected(info: cudecomp.PencilInfo, gdims: Sequence[int], periods: Sequence[bool], dtype: cudecomp.DataType) -> np.ndarray:
    """The halo-padded pencil after updating dims 0, 1 and 2: interior and halo cells hold the
    global index of their point, wrapped along periodic dims; cells beyond a non-periodic
    boundary and padding cells the sentinel (cuDecomp's reference check)."""
    k, j, i = np.indices(info.array_shape, dtype=np.int64)
    pos = (i, j, k)
    valid = np.ones(info.array_shape, dtype=bool)
    g: list[np.ndarray] = [np.empty(0)] * 3
    for p in range(3):
        ax = info.order[p]
        c = pos[p] + info.lo[p] - info.halo_extents[ax]
        valid &= pos[p] < info.shape[p] - info.padding[ax]
        outside = (c < 0) | (c >= gdims[ax])
        if periods[ax]:
            c = c % gdims[ax]
        else:
            valid &= ~outside
        g[ax] = c
    idx = (g[0] + gdims[0] * (g[1] + gdims[1] * g[2]))[valid]
    out = np.full(info.array_shape, SENTINEL, dtype=NUMPY_DTYPES[dtype])
    out[valid] = idx - 1j * idx if np.iscomplexobj(out) else idx
    return out


# Distributed FFTs against numpy.fft on the gathered global arrays

TOL64 = {"forward": 1e-12, "backward": 1e-12, "round_trip": 1e-13}
TOL32 = {"forward": 2e-5, "backward": 2e-5, "round_trip": 2e-5}


def usable(gdims: tuple[int, int, int], kind: str, pdims: tuple[int, int]) -> bool:
    """Every pencil the schedule uses has cells on every rank (checked independently of the module)."""
    x, y, z = gdims
    xs = x // 2 + 1 if kind == "r2c" else x
    pr, pc = pdims
    if pr == 1 and pc == 1:
        return True
    if pr == 1:  # X/Y slabs split along Z, Z-pencils along Y
        return z >= pc and y >= pc
    if pc == 1:  # X-pencils split along Y, Y/Z slabs along X
        return y >= pr and xs >= pr
    return min(y, xs) >= pr and min(z, y) >= pc


def make_plan(handle: cudecomp.Handle, gdims: tuple[int, int, int], pdims: tuple[int, int], **kw: Any) -> FFT | None:
    """The plan, or None (on every rank) where the process grid leaves a pencil empty."""
    from cudecomp.fft import FFT

    if not usable(gdims, kw.get("kind", "c2c"), pdims):
        with pytest.raises(cudecomp.NotSupportedError):
            FFT(handle, gdims, pdims, **kw)
        return None
    return FFT(handle, gdims, pdims, **kw)


def local_part(glob: np.ndarray, info: cudecomp.PencilInfo) -> np.ndarray:
    """This rank's pencil array cut out of a global array ``glob[z, y, x]``."""
    return np.ascontiguousarray(glob[info.global_slices].transpose(np.argsort(info.to_global_axes)))


def gather(local: Any, info: cudecomp.PencilInfo, shape: tuple[int, int, int]) -> np.ndarray:
    """The global array ``[z, y, x]`` assembled from every rank's pencil."""
    out = np.zeros(shape, local.dtype)
    for gs, axes, part in MPI.COMM_WORLD.allgather((info.global_slices, info.to_global_axes, to_host(local)[info.interior_slices])):
        out[gs] = part.transpose(axes)
    return out


def rel(a: np.ndarray, b: np.ndarray) -> float:
    """The largest difference relative to the largest magnitude of ``b``."""
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def random_field(gdims: tuple[int, int, int], dtype: np.dtype, seed: int) -> np.ndarray:
    """A reproducible standard-normal global array ``[z, y, x]`` of ``dtype``."""
    rng = np.random.default_rng(seed)
    shape = gdims[::-1]
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def check_plan(plan: FFT, tol: dict[str, float], seed: int = 0, reuse: bool = False) -> None:
    """Forward, backward and round trip against numpy.fft (float64 references); ``reuse``: also out= and repeated calls."""
    gdims, kind, norm = plan.gdims, plan.kind, plan.norm
    A = random_field(gdims, plan.input_dtype, seed)
    a = device(local_part(A, plan.input_info))
    spec = plan.forward(a)
    assert spec.dtype == plan.output_dtype and tuple(spec.shape) == plan.output_info.array_shape
    fwd = np.fft.rfftn if kind == "r2c" else np.fft.fftn
    ref = fwd(A.astype(np.float64 if kind == "r2c" else np.complex128), norm=norm)
    assert ref.shape == plan.spectral_gdims[::-1]
    assert rel(gather(spec, plan.output_info, ref.shape), ref) < tol["forward"], "forward"
    back = plan.backward(spec)
    assert back.dtype == plan.input_dtype and tuple(back.shape) == plan.input_info.array_shape
    assert rel(to_host(back), to_host(a)) < tol["round_trip"], "round trip"
    assert rel(to_host(a), local_part(A, plan.input_info)) == 0, "forward modified its input"
    # Backward of an independent spectrum: a random one (c2c), the half spectrum of a real field (r2c).
    if kind == "r2c":
        S = np.fft.rfftn(random_field(gdims, np.float64, seed + 1))
        expect = np.fft.irfftn(S, s=gdims[::-1], axes=(0, 1, 2), norm=norm)
    else:
        S = random_field(gdims, np.complex128, seed + 1)
        expect = np.fft.ifftn(S, norm=norm)
    s = device(local_part(S.astype(plan.output_dtype), plan.output_info))
    kept = to_host(s).copy()
    got = plan.backward(s)
    assert rel(gather(got, plan.input_info, expect.shape), expect) < tol["backward"], "backward"
    assert np.array_equal(to_host(s), kept), "backward modified its input"
    if not reuse:
        return
    # Results never alias the plan's scratch: earlier results survive later calls, and
    # out= receives the same values.
    spec_kept, got_kept = to_host(spec).copy(), to_host(got).copy()
    out = plan.forward(plan.backward(plan.forward(a)), plan.empty_output())
    back = plan.backward(s, plan.empty_input())
    assert np.array_equal(to_host(s), kept), "backward into out= modified its input"
    assert np.array_equal(to_host(spec), spec_kept) and np.array_equal(to_host(got), got_kept), "a later call changed a result"
    assert rel(to_host(out), spec_kept) < tol["round_trip"] and rel(to_host(back), got_kept) < tol["round_trip"], "out="
