"""GPU-variant rules of the seed page: CUDA array interface, dtypes, outputs, streams,
devices and workspaces. Skips with a reason in the CPU variant or without a GPU."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import gpu_available
from cudecomp import DataType
from oracle import factor_pairs, make

NRANKS = MPI.COMM_WORLD.size
GDIMS = (9, 10, 11)
needs_gpu = pytest.mark.gpu


@pytest.mark.skipif(cudecomp.CPU_ONLY or gpu_available(), reason="checks the GPU variant on a machine without a GPU")
def test_gpu_variant_without_driver_raises_cuda_error(comm: MPI.Comm) -> None:
    with pytest.raises(cudecomp.CudaError):
        cudecomp.Handle(comm)


def test_kernels_compile_with_nvrtc() -> None:
    """Every copy kernel compiles to CUBIN for Ampere and Hopper; needs NVRTC, not a GPU."""
    from cudecomp import _cudecomp, _libs

    _libs.preload_nvrtc()
    try:
        sizes = [_cudecomp._compile_kernels(*arch) for arch in ((8, 0), (9, 0))]
    except cudecomp.CudaError as e:
        if "not found" in str(e):
            pytest.skip(f"NVRTC not available: {e}")
        raise
    assert all(s > 1000 for s in sizes)


class CAI:
    """An object exposing (a modified copy of) another array's CUDA array interface."""

    def __init__(self, arr: Any, **changes: Any) -> None:
        self._arr = arr
        iface = dict(arr.__cuda_array_interface__)
        iface.update(changes)
        self.__cuda_array_interface__ = iface


@pytest.fixture
def grid(handle: cudecomp.Handle) -> Iterator[cudecomp.GridDesc]:
    cfg = cudecomp.GridDescConfig()
    cfg.gdims = GDIMS
    cfg.pdims = factor_pairs(NRANKS)[-1]
    g = handle.create_grid(cfg)
    yield g
    g.destroy()


def pencils(grid: cudecomp.GridDesc, dtype: DataType = DataType.DOUBLE) -> tuple[Any, Any, np.ndarray]:
    import cupy as cp

    ia, ib = grid.get_pencil_info(0), grid.get_pencil_info(1)
    x = cp.asarray(make(ia, GDIMS, dtype))
    y = cp.zeros(ib.array_shape, x.dtype)
    return x, y, make(ib, GDIMS, dtype)


def check_works(grid: cudecomp.GridDesc) -> None:
    import cupy as cp

    x, y, want = pencils(grid)
    grid.transpose_x_to_y(x, y)
    assert np.array_equal(cp.asnumpy(y), want)


@needs_gpu
def test_cupy_output_allocated_on_stream(grid: cudecomp.GridDesc) -> None:
    import cupy as cp

    x, _, want = pencils(grid, DataType.FLOAT_COMPLEX)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        y = grid.transpose_x_to_y(x)  # None -> CuPy's current stream
    s.synchronize()
    assert isinstance(y, cp.ndarray) and y.dtype == np.complex64
    assert np.array_equal(cp.asnumpy(y), want)


@needs_gpu
@pytest.mark.parametrize("kind", ["none", "int", "ptr", "protocol", "default"])
def test_stream_arguments(grid: cudecomp.GridDesc, kind: str) -> None:
    import cupy as cp

    s = cp.cuda.Stream()

    class Protocol:
        def __cuda_stream__(self) -> tuple[int, int]:
            return (0, s.ptr)

    arg = {"none": None, "int": s.ptr, "ptr": s, "protocol": Protocol(), "default": 0}[kind]
    x, y, want = pencils(grid)
    grid.transpose_x_to_y(x, y, stream=arg)
    s.synchronize()
    cp.cuda.Device().synchronize()
    assert np.array_equal(cp.asnumpy(y), want)


@needs_gpu
def test_cai_versions_and_opaque_storage(grid: cudecomp.GridDesc) -> None:
    import cupy as cp

    for v in (0, 1, 2, 3):
        x, y, want = pencils(grid)
        grid.transpose_x_to_y(CAI(x, version=v), CAI(y, version=v))
        assert np.array_equal(cp.asnumpy(y), want)
    x, y, want = pencils(grid, DataType.DOUBLE_COMPLEX)
    grid.transpose_x_to_y(CAI(x, typestr="|V16"), CAI(y, typestr="|V16"), dtype=DataType.DOUBLE_COMPLEX)
    assert np.array_equal(cp.asnumpy(y), want)


@needs_gpu
@pytest.mark.mpi(min_ranks=2)  # ranks sharing a GPU
def test_nvshmem_refused_on_shared_gpus(handle: cudecomp.Handle) -> None:
    from oracle import nccl_usable

    if nccl_usable():
        pytest.skip("every rank has a GPU of its own here")
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = GDIMS, factor_pairs(NRANKS)[-1]
    cfg.transpose_comm_backend = cudecomp.TransposeCommBackend.NVSHMEM
    with pytest.raises(cudecomp.NotSupportedError, match="one GPU per rank"):
        handle.create_grid(cfg)


class DLPackOnly:
    """An object exporting another array only through DLPack (as JAX arrays do)."""

    def __init__(self, arr: Any) -> None:
        self._arr = arr

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._arr.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> Any:
        return self._arr.__dlpack_device__()


class LegacyDLPack(DLPackOnly):
    """A DLPack exporter older than DLPack 1.0: its capsules say nothing about writing."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        if "max_version" in kwargs:
            raise TypeError("max_version")
        return self._arr.__dlpack__(*args, **kwargs)


@needs_gpu
def test_dlpack_inputs(grid: cudecomp.GridDesc) -> None:
    import cupy as cp

    x, y, want = pencils(grid)
    grid.transpose_x_to_y(DLPackOnly(x), y)
    assert np.array_equal(cp.asnumpy(y), want)
    # A DLPack 1.0 export says whether it may be written (CuPy's are writable): an output.
    y[...] = 0
    grid.transpose_x_to_y(x, DLPackOnly(y))
    assert np.array_equal(cp.asnumpy(y), want)
    # An older export says nothing: refused as an output, on every rank.
    with pytest.raises(cudecomp.InvalidUsageError, match="DLPack"):
        grid.transpose_x_to_y(x, LegacyDLPack(y))
    with pytest.raises(TypeError):  # NumPy exports DLPack too, on the host
        grid.transpose_x_to_y(DLPackOnly(x.get()), y)
    check_works(grid)


def gpu_errors() -> list[tuple[str, Any, type[Exception]]]:
    def call(f: Any) -> Any:
        return f

    return [
        ("numpy input", call(lambda g, x, y: g.transpose_x_to_y(x.get(), y)), TypeError),
        ("no out for non-CuPy input", call(lambda g, x, y: g.transpose_x_to_y(CAI(x))), TypeError),
        ("numpy dtype", call(lambda g, x, y: g.transpose_x_to_y(x, y, dtype=np.float64)), TypeError),
        ("dtype mismatch", call(lambda g, x, y: g.transpose_x_to_y(x, y, dtype=DataType.FLOAT)), cudecomp.InvalidUsageError),
        ("version 4", call(lambda g, x, y: g.transpose_x_to_y(CAI(x, version=4), y)), cudecomp.InvalidUsageError),
        ("mask", call(lambda g, x, y: g.transpose_x_to_y(CAI(x, mask=x), y)), cudecomp.InvalidUsageError),
        ("big endian", call(lambda g, x, y: g.transpose_x_to_y(CAI(x, typestr=">f8"), y)), cudecomp.InvalidUsageError),
        ("read-only out", call(lambda g, x, y: g.transpose_x_to_y(x, CAI(y, data=(y.data.ptr, True)))), cudecomp.InvalidUsageError),
        ("opaque without dtype", call(lambda g, x, y: g.transpose_x_to_y(CAI(x, typestr="|V8"), y)), cudecomp.InvalidUsageError),
        ("strided", call(lambda g, x, y: g.transpose_x_to_y(CAI(x, strides=(8, 8, 8)), y)), cudecomp.InvalidUsageError),
        ("host pointer", call(lambda g, x, y: g.transpose_x_to_y(CAI(x, data=(HOST.ctypes.data, False)), y)), cudecomp.InvalidUsageError),
        ("bad stream", call(lambda g, x, y: g.transpose_x_to_y(x, y, stream="s")), TypeError),
        ("small work", call(lambda g, x, y: g.transpose_x_to_y(x, y, work=x[:1, :1, :1])), cudecomp.InvalidUsageError),
        ("halo numpy", call(lambda g, x, y: g.update_halos_x(x.get(), (1, 1, 1), None, 1)), TypeError),
    ]


HOST = np.zeros(4096)


@needs_gpu
@pytest.mark.parametrize("name, call, exc", gpu_errors(), ids=[e[0] for e in gpu_errors()])
def test_gpu_argument_errors(grid: cudecomp.GridDesc, name: str, call: Any, exc: type[Exception]) -> None:
    x, y, _ = pencils(grid)
    with pytest.raises(exc):
        call(grid, x, y)
    check_works(grid)


@needs_gpu
def test_device_mismatch(handle: cudecomp.Handle, grid: cudecomp.GridDesc) -> None:
    import cupy as cp

    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    other = (cp.cuda.Device().id + 1) % cp.cuda.runtime.getDeviceCount()
    x, y, _ = pencils(grid)
    with cp.cuda.Device(other):
        x2 = cp.asarray(x.get())
    with pytest.raises(cudecomp.InvalidUsageError, match="device"):
        grid.transpose_x_to_y(x2, y)
    check_works(grid)


@needs_gpu
@pytest.mark.mpi
def test_malloc_workspace(handle: cudecomp.Handle, grid: cudecomp.GridDesc) -> None:
    import cupy as cp

    n = grid.get_transpose_workspace_size() * 8
    buf = handle.malloc(grid, n)
    assert buf.__cuda_array_interface__["shape"] == (n,)
    x, y, want = pencils(grid)
    grid.transpose_x_to_y(x, y, work=buf)
    assert np.array_equal(cp.asnumpy(y), want)
    handle.free(grid, buf)
    with pytest.raises(cudecomp.InvalidUsageError):
        handle.free(grid, buf)
    with pytest.raises(TypeError):
        handle.free(grid, x)
    check_works(grid)


STEPS = (("transpose_x_to_y", 1), ("transpose_y_to_z", 2), ("transpose_z_to_y", 1), ("transpose_y_to_x", 0))


def nccl_grids(handle: cudecomp.Handle, gdims: tuple[int, int, int]) -> Iterator[cudecomp.GridDesc]:
    """Yield an NCCL grid of ``gdims`` for every process grid of the ranks (skips without
    one GPU per rank); each is destroyed once the caller is done with it."""
    from oracle import nccl_usable

    if not nccl_usable():
        pytest.skip("NCCL needs one GPU per rank")
    for pdims in factor_pairs(NRANKS):
        cfg = cudecomp.GridDescConfig()
        cfg.gdims, cfg.pdims = gdims, pdims
        cfg.transpose_comm_backend = cudecomp.TransposeCommBackend.NCCL
        grid = handle.create_grid(cfg)
        try:
            yield grid
        finally:
            grid.destroy()


def check_four_transposes(grid: cudecomp.GridDesc, gdims: tuple[int, int, int], dtype: DataType, work: Any = None) -> Any:
    """Run X→Y→Z→Y→X from the oracle's X-pencil, checking every output (``work`` passed to
    every other transpose); return the final X-pencil."""
    import cupy as cp

    a = cp.asarray(make(grid.get_pencil_info(0), gdims, dtype))
    for i, (step, ax) in enumerate(STEPS):
        info = grid.get_pencil_info(ax)
        out = cp.zeros(info.array_shape, a.dtype)
        getattr(grid, step)(a, out, work=work if i % 2 else None)
        assert np.array_equal(cp.asnumpy(out), make(info, gdims, dtype)), (grid.config.pdims, step)
        a = out
    return a


@needs_gpu
@pytest.mark.mpi(min_ranks=2)  # a distributed NCCL pipeline
@pytest.mark.parametrize("dtype", [DataType.DOUBLE, DataType.DOUBLE_COMPLEX], ids=["f64", "c128"])
def test_nccl_long_rows(handle: cudecomp.Handle, dtype: DataType) -> None:
    """NCCL pipelines over rows of several KiB (float64 moved as 16-byte cells): every
    transpose of such a grid matches the oracle (the suite's grids have short rows)."""
    gdims = (1024 * NRANKS, 12, 10)
    for grid in nccl_grids(handle, gdims):
        check_four_transposes(grid, gdims, dtype)


@needs_gpu
@pytest.mark.mpi(min_ranks=2)  # a distributed NCCL pipeline
@pytest.mark.parametrize("rank0", ["0", "1"], ids=["rank0-off", "all-on"])
def test_nccl_registration_agreed(comm: MPI.Comm, monkeypatch: pytest.MonkeyPatch, rank0: str) -> None:
    """NCCL transposes through registered workspaces (``CUDECOMP_ENABLE_NCCL_UBR``): right
    whether every rank registers or one declines (then none does: a registered send must
    meet a registered receive), with or without an explicit ``work`` (checked, then the
    registered workspace is used)."""
    import cupy as cp

    monkeypatch.setenv("CUDECOMP_ENABLE_NCCL_UBR", rank0 if comm.rank == 0 else "1")
    gdims = (64 * NRANKS, 24, 20)
    h = cudecomp.Handle(comm)
    try:
        for grid in nccl_grids(h, gdims):
            work = h.malloc(grid, grid.get_transpose_workspace_size() * 8)
            a = check_four_transposes(grid, gdims, DataType.DOUBLE, work)
            with pytest.raises(cudecomp.InvalidUsageError, match="work"):
                grid.transpose_x_to_y(a, work=cp.zeros(8, cp.uint8))
            h.free(grid, work)
    finally:
        h.finalize()
