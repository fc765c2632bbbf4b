"""Arrays the library allocates (``GridDesc.empty_pencil`` / ``zeros_pencil``).

On DIRECT grids such arrays live in memory the node's other ranks map (node-shared host
memory in the CPU variant, exported device memory in the GPU variant), and when every
member's output of a transpose is one, each rank writes its chunks straight into the
others' outputs: one copy instead of two. These tests run the global-index oracle over
that path (every direction, layouts with halos and padding, both MPI families under
``mpiexec`` with 1-6 ranks), check that the path is really taken (the process's count of
single copies), and that everything else falls back to the two-copy exchange: outputs that
are not library arrays on some rank, in-place calls, small arrays. Arrays outlive their
grid and handle; a wrong array is refused like any other."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import gpu_available, handle_with
from cudecomp import DataType, HaloCommBackend, TransposeCommBackend
from cudecomp import _cudecomp as ext
from oracle import ALL_CONTIGUOUS, factor_pairs, make
from oracle import halo_expected as expected_halo

NRANKS = MPI.COMM_WORLD.size
GPU = not cudecomp.CPU_ONLY
if GPU and gpu_available():
    import cupy as xp
else:
    xp = np
GDIMS = (13, 11, 7)
DIRECTIONS = [("transpose_x_to_y", 0, 1), ("transpose_y_to_z", 1, 2), ("transpose_z_to_y", 2, 1), ("transpose_y_to_x", 1, 0)]
LAYOUTS = [
    {},
    {"input_halo_extents": (1, 0, 2), "output_padding": (0, 1, 0)},
    {"input_padding": (2, 0, 1), "output_halo_extents": (0, 2, 1)},
]

pytestmark = [pytest.mark.mpi, pytest.mark.skipif(GPU and not gpu_available(), reason="GPU variant without a usable GPU")]


#: Small test arrays are node-shared too (the default keeps arrays under 1 MiB private).
#: GPUs copy once only when asked (``CUDECOMP_SINGLE_COPY=1``): these tests ask.
SHARED = {"CUDECOMP_SHARED_ARRAY_MIN_BYTES": "0", "CUDECOMP_SINGLE_COPY": "1" if GPU else None}


@pytest.fixture(scope="module")
def handle() -> Iterator[cudecomp.Handle]:
    """The module's handle, made with :data:`SHARED` settings."""
    if GPU and not gpu_available():
        pytest.skip("GPU variant without a usable GPU")
    with handle_with(**SHARED) as h:
        yield h


def grid_of(
    handle: cudecomp.Handle, pdims: tuple[int, int], contiguous: tuple[bool, bool, bool], backend: Any = TransposeCommBackend.DIRECT
) -> cudecomp.GridDesc:
    c = cudecomp.GridDescConfig()
    c.gdims, c.pdims = GDIMS, pdims
    c.transpose_axis_contiguous = contiguous
    c.transpose_comm_backend, c.halo_comm_backend = (
        backend,
        HaloCommBackend.DIRECT if backend is TransposeCommBackend.DIRECT else HaloCommBackend.MPI,
    )
    return handle.create_grid(c)


def shared(a: Any) -> bool:
    """Whether ``a`` is a view of the library's node-shared (GPU: exported) memory."""
    if GPU:
        return type(getattr(a.data.mem, "_owner", None)).__name__ == "_DeviceMemory"
    b: Any = a
    while isinstance(b, np.ndarray):
        b = b.base
    return type(b).__name__ == "_SharedMemory"


def host(a: Any) -> np.ndarray:
    """The values of ``a`` on the host (waits for the work queued on it)."""
    return xp.asnumpy(a) if GPU else a


def same(a: Any, b: np.ndarray) -> bool:
    """Whether array ``a`` (either variant) holds exactly ``b``."""
    return np.array_equal(host(a), b)


def members(grid: cudecomp.GridDesc, a: int, b: int) -> int:
    """Ranks exchanging in the transpose from axis ``a`` to ``b``."""
    pr, pc = grid.config.pdims
    return pr if 0 in (a, b) else pc


def library_pair(grid: cudecomp.GridDesc, a: int, b: int, dtype: DataType, layout: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """Input (the oracle, in a library array) and output (a library array), with their pencils."""
    ia = grid.get_pencil_info(a, layout.get("input_halo_extents"), layout.get("input_padding"))
    ib = grid.get_pencil_info(b, layout.get("output_halo_extents"), layout.get("output_padding"))
    x = grid.empty_pencil(a, dtype, layout.get("input_halo_extents"), layout.get("input_padding"))
    x[...] = xp.asarray(make(ia, GDIMS, dtype))
    y = grid.zeros_pencil(b, dtype, layout.get("output_halo_extents"), layout.get("output_padding"))
    y[...] = xp.asarray(make(ib, GDIMS, dtype))  # every cell not written keeps the oracle's sentinel
    y[ib.interior_slices] = 0
    return x, y, ia, ib


@pytest.mark.parametrize("pdims", factor_pairs(NRANKS))
@pytest.mark.parametrize("contiguous", ALL_CONTIGUOUS)
@pytest.mark.parametrize("dtype", list(DataType))
def test_single_copy_matches_the_oracle(
    handle: cudecomp.Handle, pdims: tuple[int, int], contiguous: tuple[bool, bool, bool], dtype: DataType
) -> None:
    with grid_of(handle, pdims, contiguous) as g:
        for layout in LAYOUTS:
            for name, a, b in DIRECTIONS:
                x, y, ia, ib = library_pair(g, a, b, dtype, layout)
                assert shared(x) and shared(y)
                before = ext._single_copy_count()
                getattr(g, name)(x, y, **layout)
                assert same(y, make(ib, GDIMS, dtype)), (name, layout)
                assert same(x, make(ia, GDIMS, dtype)), "input changed"
                # Every rank of a process grid row or column of several ranks took the path.
                assert ext._single_copy_count() - before == int(members(g, a, b) > 1), (name, layout)


K = 3


def library_batch(grid: cudecomp.GridDesc, a: int, b: int, dtype: DataType, layout: dict[str, Any]) -> tuple[Any, Any, list[np.ndarray]]:
    """Return ``K`` fields of pencil ``a``, a zeroed output of pencil ``b`` (library arrays) and each field's expected output."""
    ia = grid.get_pencil_info(a, layout.get("input_halo_extents"), layout.get("input_padding"))
    ib = grid.get_pencil_info(b, layout.get("output_halo_extents"), layout.get("output_padding"))
    x = grid.empty_pencil(a, dtype, layout.get("input_halo_extents"), layout.get("input_padding"), fields=K)
    y = grid.zeros_pencil(b, dtype, layout.get("output_halo_extents"), layout.get("output_padding"), fields=K)
    want = []
    for f in range(K):
        xf = make(ia, GDIMS, dtype)
        xf[ia.interior_slices] += 1000 * f
        x[f] = xp.asarray(xf)
        yf = make(ib, GDIMS, dtype)
        yf[ib.interior_slices] += 1000 * f
        want.append(yf)
        y[f] = xp.asarray(yf)
        y[(f, *ib.interior_slices)] = 0
    return x, y, want


def test_batched_allocations(handle: cudecomp.Handle) -> None:
    with grid_of(handle, (NRANKS, 1), (False, False, False)) as g:
        info = g.get_pencil_info(1, (1, 0, 0))
        a = g.zeros_pencil(1, DataType.FLOAT_COMPLEX, (1, 0, 0), fields=K)
        assert a.shape == (K, *info.array_shape) and a.dtype == np.complex64 and a.flags.c_contiguous
        assert shared(a) and not host(a).any()
        assert g.empty_pencil(1, DataType.DOUBLE, fields=None).shape == g.get_pencil_info(1).array_shape
        assert g.empty_pencil(1, DataType.DOUBLE, fields=1).shape == (1, *g.get_pencil_info(1).array_shape)
        with pytest.raises(cudecomp.InvalidUsageError, match="at least 1 field"):
            g.empty_pencil(0, DataType.DOUBLE, fields=0)
        with pytest.raises(TypeError, match="fields"):
            g.zeros_pencil(0, DataType.DOUBLE, fields="3")


@pytest.mark.parametrize("pdims", factor_pairs(NRANKS))
@pytest.mark.parametrize("dtype", [DataType.FLOAT, DataType.DOUBLE_COMPLEX])
def test_batches_of_library_arrays_copy_once(handle: cudecomp.Handle, pdims: tuple[int, int], dtype: DataType) -> None:
    # Each field's chunk goes straight into the peer's batch at the field's place; GPUs
    # take the two copies for batches (their single copy of a batch has not run on one).
    with grid_of(handle, pdims, (False, True, False)) as g:
        for layout in LAYOUTS:
            for name, a, b in DIRECTIONS:
                x, y, want = library_batch(g, a, b, dtype, layout)
                before = ext._single_copy_count()
                getattr(g, name)(x, y, **layout)
                for f in range(K):
                    assert same(y[f], want[f]), (name, layout, f)
                assert ext._single_copy_count() - before == int(members(g, a, b) > 1 and not GPU), (name, layout)


def test_a_private_output_on_one_rank_falls_back_everywhere(handle: cudecomp.Handle, comm: MPI.Comm) -> None:
    with grid_of(handle, (NRANKS, 1), (False, False, False)) as g:
        x, y, _, ib = library_pair(g, 0, 1, DataType.DOUBLE, {})
        if comm.rank == 0:
            y = xp.zeros_like(y)
        before = ext._single_copy_count()
        g.transpose_x_to_y(x, y)
        assert same(y, make(ib, GDIMS, DataType.DOUBLE))
        assert ext._single_copy_count() == before
        # Agreed again at the next call: all library arrays, single copy.
        x, y, _, ib = library_pair(g, 0, 1, DataType.DOUBLE, {})
        g.transpose_x_to_y(x, y)
        assert same(y, make(ib, GDIMS, DataType.DOUBLE))
        assert ext._single_copy_count() - before == int(NRANKS > 1)


def test_in_place_falls_back(handle: cudecomp.Handle) -> None:
    with grid_of(handle, (NRANKS, 1), (False, False, False)) as g:
        ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
        n = max(ia.size, ib.size)
        owner = g.empty_pencil(0, DataType.DOUBLE, padding=(0, 0, n))  # room for either pencil
        buf = owner.reshape(-1)[:n]
        buf[: ia.size] = xp.asarray(make(ia, GDIMS, DataType.DOUBLE).ravel())
        before = ext._single_copy_count()
        y = g.transpose_x_to_y(buf[: ia.size].reshape(ia.array_shape), buf[: ib.size].reshape(ib.array_shape))
        assert same(y, make(ib, GDIMS, DataType.DOUBLE))
        assert ext._single_copy_count() == before


def test_arrays_outlive_their_grid_and_handle(comm: MPI.Comm) -> None:
    h = cudecomp.Handle(comm)
    g = grid_of(h, (NRANKS, 1), (False, False, False))
    x, y, _, ib = library_pair(g, 0, 1, DataType.DOUBLE, {})
    g.transpose_x_to_y(x, y)
    g.destroy()
    h.finalize()
    assert same(y, make(ib, GDIMS, DataType.DOUBLE))
    y[...] = 1.0  # still ordinary, writable memory
    assert float(host(y).sum()) == y.size
    del x, y  # freed with the last view


def test_many_arrays_come_and_go(handle: cudecomp.Handle) -> None:
    # Peers keep a few mappings of each rank's arrays: freed arrays and new ones mix.
    with grid_of(handle, (1, NRANKS), (False, False, False)) as g:
        for i in range(20):
            x, y, _, ib = library_pair(g, 1, 2, DataType.FLOAT, {})
            g.transpose_y_to_z(x, y)
            assert same(y, make(ib, GDIMS, DataType.FLOAT)), i
            if i % 3 == 0:
                keep = (x, y)  # some stay alive a while
        del keep


def test_a_wrong_library_array_is_refused(handle: cudecomp.Handle) -> None:
    with grid_of(handle, (NRANKS, 1), (False, False, False)) as g:
        x = g.empty_pencil(0, DataType.DOUBLE)
        wrong = g.empty_pencil(0, DataType.DOUBLE)  # an X-pencil where a Y-pencil belongs
        if g.get_pencil_info(0).array_shape == g.get_pencil_info(1).array_shape:
            pytest.skip("X- and Y-pencils have the same shape here")
        with pytest.raises(cudecomp.InvalidUsageError, match="out"):
            g.transpose_x_to_y(x, wrong)
        x[...] = xp.asarray(make(g.get_pencil_info(0), GDIMS, DataType.DOUBLE))
        y = g.transpose_x_to_y(x, g.empty_pencil(1, DataType.DOUBLE))  # the handle still works
        assert same(y, make(g.get_pencil_info(1), GDIMS, DataType.DOUBLE))


def test_other_backends_and_small_arrays_stay_private(handle: cudecomp.Handle) -> None:
    with grid_of(handle, (NRANKS, 1), (False, False, False), TransposeCommBackend.MPI_P2P) as g:
        assert not shared(g.empty_pencil(0, DataType.DOUBLE))
    with handle_with(CUDECOMP_SHARED_ARRAY_MIN_BYTES=str(1 << 30)) as h, grid_of(h, (NRANKS, 1), (False, False, False)) as g:
        assert not shared(g.empty_pencil(0, DataType.DOUBLE))


@pytest.mark.parametrize("pdims", factor_pairs(NRANKS))
def test_halo_updates_of_library_arrays(handle: cudecomp.Handle, pdims: tuple[int, int]) -> None:
    halo, periods = (1, 1, 1), (True, True, True)
    with grid_of(handle, pdims, (False, False, False)) as g:
        for axis, update in enumerate((g.update_halos_x, g.update_halos_y, g.update_halos_z)):
            info = g.get_pencil_info(axis, halo)
            a = g.empty_pencil(axis, DataType.DOUBLE, halo)
            assert shared(a)
            a[...] = xp.asarray(make(info, GDIMS, DataType.DOUBLE))
            for dim in range(3):
                update(a, halo, periods, dim)
            assert same(a, expected_halo(info, GDIMS, periods, DataType.DOUBLE)), axis


@pytest.mark.parametrize("library", [False, True])
def test_autotuner_times_library_arrays_when_asked(handle: cudecomp.Handle, library: bool) -> None:
    c = cudecomp.GridDescConfig()
    c.gdims, c.pdims = GDIMS, (0, 0)  # the grid search times DIRECT on every process grid
    c.transpose_comm_backend, c.halo_comm_backend = TransposeCommBackend.DIRECT, HaloCommBackend.DIRECT
    o = cudecomp.GridDescAutotuneOptions()
    o.n_warmup_trials, o.n_trials = 1, 1
    o.transpose_use_library_arrays = library
    before = ext._single_copy_count()
    with handle.create_grid(c, o) as g:
        assert g.autotune_result is not None
    assert (ext._single_copy_count() > before) == (library and NRANKS > 1)


@pytest.mark.skipif(GPU, reason="runs the CPU variant out of descriptors")
def test_without_shared_memory_arrays_are_ordinary(handle: cudecomp.Handle) -> None:
    import resource
    import warnings

    with grid_of(handle, (NRANKS, 1), (False, False, False)) as g:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            # No descriptor left: neither a memory file nor a named object can be made.
            resource.setrlimit(resource.RLIMIT_NOFILE, (0, hard))
            try:
                a = g.empty_pencil(0, DataType.DOUBLE)
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert not shared(a) and a.shape == g.get_pencil_info(0).array_shape
        assert any("other ranks can map is unavailable" in str(w.message) for w in seen)
        x, y, _, ib = library_pair(g, 0, 1, DataType.DOUBLE, {})
        g.transpose_x_to_y(x, y)  # and the next arrays are shared again
        assert shared(y) and same(y, make(ib, GDIMS, DataType.DOUBLE))


@pytest.mark.skipif(GPU or NRANKS < 2, reason="runs one CPU rank out of descriptors; needs peers")
def test_a_rank_that_cannot_map_fails_everyone_without_a_hang(handle: cudecomp.Handle, comm: MPI.Comm) -> None:
    import resource

    with grid_of(handle, (NRANKS, 1), (False, False, False)) as g:
        x, y, _, ib = library_pair(g, 0, 1, DataType.DOUBLE, {})
        g.transpose_x_to_y(x, y)  # warms the workspaces up
        x, y, _, ib = library_pair(g, 0, 1, DataType.DOUBLE, {})  # new outputs: peers must map them
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if comm.rank == 0:
            resource.setrlimit(resource.RLIMIT_NOFILE, (0, hard))  # rank 0 cannot open them
        try:
            with pytest.raises(cudecomp.InternalError) as e:
                g.transpose_x_to_y(x, y)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        if comm.rank == 0:
            assert "mapping rank" in str(e.value)  # the cause, where it happened
        else:
            assert "rank 0 could not write" in str(e.value)
        g.transpose_x_to_y(x, y)  # the next call works everywhere
        assert same(y, make(ib, GDIMS, DataType.DOUBLE))


@pytest.mark.skipif(GPU or NRANKS < 2, reason="CPU single copies; needs peers")
def test_ranks_with_different_dtypes_fail_with_a_hint(comm: MPI.Comm) -> None:
    # Without the checking mode a rank cannot know its peers' dtype before it maps their
    # outputs: the one that finds a peer's array too small says what the likely misuse is.
    unchecked = {**SHARED, "CUDECOMP_CHECK_COLLECTIVES": "0"}  # (it would name the mismatch first)
    with handle_with(**unchecked) as h, grid_of(h, (NRANKS, 1), (False, False, False)) as g:
        dtype = DataType.FLOAT if comm.rank == 1 else DataType.DOUBLE
        x, y, _, _ = library_pair(g, 0, 1, dtype, {})
        with pytest.raises(cudecomp.CudecompError) as e:
            g.transpose_x_to_y(x, y)
        hinted = comm.allgather(isinstance(e.value, cudecomp.InvalidUsageError) and "same dtype" in str(e.value))
        assert any(hinted), hinted
        x, y, _, ib = library_pair(g, 0, 1, DataType.DOUBLE, {})
        g.transpose_x_to_y(x, y)  # the next call works everywhere
        assert same(y, make(ib, GDIMS, DataType.DOUBLE))


@pytest.mark.skipif(not GPU or NRANKS < 2, reason="the GPU variant's default; needs peers")
def test_gpus_copy_twice_unless_asked() -> None:
    with handle_with(**{**SHARED, "CUDECOMP_SINGLE_COPY": None}) as h, grid_of(h, (NRANKS, 1), (False, False, False)) as g:
        x, y, _, ib = library_pair(g, 0, 1, DataType.DOUBLE, {})
        assert shared(x) and shared(y)
        before = ext._single_copy_count()
        g.transpose_x_to_y(x, y)
        assert same(y, make(ib, GDIMS, DataType.DOUBLE))
        assert ext._single_copy_count() == before
