"""NVSHMEM backends (GPU variant, one GPU per rank): lifecycles, mixed grids and misuse.

The oracle suites (tests/test_transpose.py, tests/test_halo.py) run every NVSHMEM backend
through the same checks as the others when NVSHMEM is usable here; this file covers what is
particular to NVSHMEM: the process-wide runtime across handles, symmetric workspaces over
many grids, NVSHMEM halos beside NCCL transposes, and refusals."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from cudecomp import DataType, HaloCommBackend, TransposeCommBackend
from oracle import factor_pairs, halo_expected, make, nvshmem_usable

NRANKS = MPI.COMM_WORLD.size
GDIMS = (12, 10, 9)

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.gpu,
    pytest.mark.skipif(cudecomp.CPU_ONLY or not nvshmem_usable(), reason="needs NVSHMEM (GPU variant, one GPU per rank)"),
]


def config(t: TransposeCommBackend, h: HaloCommBackend, gdims: tuple[int, int, int] = GDIMS) -> Any:
    c = cudecomp.GridDescConfig()
    c.gdims, c.pdims = gdims, factor_pairs(NRANKS)[-1]
    c.transpose_comm_backend, c.halo_comm_backend = t, h
    return c


def round_trip(g: cudecomp.GridDesc, gdims: tuple[int, int, int] = GDIMS) -> None:
    import cupy as cp

    info = [g.get_pencil_info(a) for a in range(3)]
    x = cp.asarray(make(info[0], gdims, DataType.DOUBLE))
    y = g.transpose_x_to_y(x)
    z = g.transpose_y_to_z(y)
    assert np.array_equal(z.get(), make(info[2], gdims, DataType.DOUBLE))
    back = g.transpose_y_to_x(g.transpose_z_to_y(z))
    assert np.array_equal(back.get(), x.get())
    h = g.get_pencil_info(0, (1, 1, 1))
    arr = cp.asarray(make(h, gdims, DataType.DOUBLE))
    for dim in range(3):
        g.update_halos_x(arr, (1, 1, 1), (True, True, True), dim)
    assert np.array_equal(arr.get(), halo_expected(h, gdims, (True, True, True), DataType.DOUBLE))


@pytest.mark.parametrize("t", [TransposeCommBackend.NVSHMEM, TransposeCommBackend.NVSHMEM_PL, TransposeCommBackend.NVSHMEM_SM])
def test_many_grids_on_one_handle(handle: cudecomp.Handle, t: TransposeCommBackend) -> None:
    for i in range(100):
        gdims = (12 + i % 5, 10, 9 + i % 3)  # sizes change: symmetric workspaces grow
        with handle.create_grid(config(t, HaloCommBackend.NVSHMEM, gdims)) as g:
            if i % 10 == 0:
                round_trip(g, gdims)


def test_handles_on_congruent_communicators(comm: MPI.Comm) -> None:
    dup = comm.Dup()
    try:
        for c in (comm, dup, comm):
            with cudecomp.Handle(c) as h, h.create_grid(config(TransposeCommBackend.NVSHMEM, HaloCommBackend.NVSHMEM_BLOCKING)) as g:
                round_trip(g)
    finally:
        dup.Free()


def test_two_handles_at_once(comm: MPI.Comm) -> None:
    with cudecomp.Handle(comm) as a, cudecomp.Handle(comm) as b:
        ga = a.create_grid(config(TransposeCommBackend.NVSHMEM_SM, HaloCommBackend.NVSHMEM))
        gb = b.create_grid(config(TransposeCommBackend.NVSHMEM_PL, HaloCommBackend.NVSHMEM_BLOCKING))
        round_trip(ga)
        round_trip(gb)
        ga.destroy()
        gb.destroy()


def test_mixed_nccl_transposes_nvshmem_halos(handle: cudecomp.Handle) -> None:
    with handle.create_grid(config(TransposeCommBackend.NCCL, HaloCommBackend.NVSHMEM)) as g:
        round_trip(g)
    with handle.create_grid(config(TransposeCommBackend.NVSHMEM, HaloCommBackend.NCCL)) as g:
        round_trip(g)


@pytest.mark.skipif(NRANKS < 2, reason="needs two ranks")
def test_non_congruent_communicator(handle: cudecomp.Handle, comm: MPI.Comm) -> None:
    # Reversed rank order: PE r is not rank r.
    rev = comm.Split(0, comm.size - 1 - comm.rank)
    try:
        with cudecomp.Handle(rev) as h:
            with pytest.raises(cudecomp.InvalidUsageError, match="congruent"):
                h.create_grid(config(TransposeCommBackend.NVSHMEM, HaloCommBackend.MPI))
            with h.create_grid(config(TransposeCommBackend.NCCL, HaloCommBackend.NCCL)) as g:
                round_trip(g)
    finally:
        rev.Free()
    with handle.create_grid(config(TransposeCommBackend.NVSHMEM, HaloCommBackend.NVSHMEM)) as g:
        round_trip(g)


def test_explicit_work_checked(handle: cudecomp.Handle) -> None:
    import cupy as cp

    with handle.create_grid(config(TransposeCommBackend.NVSHMEM, HaloCommBackend.NVSHMEM)) as g:
        ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
        x = cp.asarray(make(ia, GDIMS, DataType.DOUBLE))
        y = cp.zeros(ib.array_shape)
        with pytest.raises(cudecomp.InvalidUsageError, match="work"):
            g.transpose_x_to_y(x, y, work=cp.zeros(8, np.uint8))
        work = cp.zeros(g.get_transpose_workspace_size() * 8, np.uint8)
        g.transpose_x_to_y(x, y, work=work)  # checked, then the symmetric workspace serves
        assert np.array_equal(y.get(), make(ib, GDIMS, DataType.DOUBLE))


@pytest.mark.skipif(NRANKS == 1, reason="within one rank an out-of-place transpose takes no workspace: nothing grows in a capture")
def test_capture_before_warm_up_refused(comm: MPI.Comm) -> None:
    # Captures replay (tests/test_graphs.py); one before the first eager run is refused.
    import cupy as cp

    with cudecomp.Handle(comm) as h, h.create_grid(config(TransposeCommBackend.NVSHMEM, HaloCommBackend.NVSHMEM)) as g:
        ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
        x = cp.asarray(make(ia, GDIMS, DataType.DOUBLE))
        y = cp.zeros(ib.array_shape)
        s = cp.cuda.Stream(non_blocking=True)
        s.begin_capture()
        try:
            with pytest.raises(cudecomp.NotSupportedError, match="run the operation once"):
                g.transpose_x_to_y(x, y, stream=s)
        finally:
            s.end_capture()
        round_trip(g)


def test_autotuner_tries_nvshmem(handle: cudecomp.Handle) -> None:
    o = cudecomp.GridDescAutotuneOptions()
    o.n_warmup_trials, o.n_trials = 1, 1
    o.autotune_transpose_backend = True
    with handle.create_grid(config(TransposeCommBackend.MPI_P2P, HaloCommBackend.MPI), o) as g:
        tried = {t.backend.name for t in g.autotune_result.trials}
    assert {"NVSHMEM", "NVSHMEM_PL", "NVSHMEM_SM"} <= tried
    o.disable_nvshmem_backends = True
    with handle.create_grid(config(TransposeCommBackend.MPI_P2P, HaloCommBackend.MPI), o) as g:
        tried = {t.backend.name for t in g.autotune_result.trials}
    assert not tried & {"NVSHMEM", "NVSHMEM_PL", "NVSHMEM_SM"}


def work_view(buf: Any, nbytes: int, offset: int = 0) -> Any:
    """``nbytes`` of a ``Handle.malloc`` buffer from ``offset`` on, as a CuPy byte array."""
    import cupy as cp

    return cp.asarray(buf)[offset : offset + nbytes]


@pytest.mark.parametrize("t", [TransposeCommBackend.NVSHMEM, TransposeCommBackend.NVSHMEM_PL, TransposeCommBackend.NVSHMEM_SM])
def test_symmetric_malloc_serves_as_the_workspace(handle: cudecomp.Handle, t: TransposeCommBackend) -> None:
    import cupy as cp

    with handle.create_grid(config(t, HaloCommBackend.NVSHMEM)) as g:
        need = g.get_transpose_workspace_size() * 8
        # Ranks may ask for different sizes: every rank gets the largest.
        buf = handle.malloc(g, need + MPI.COMM_WORLD.rank)
        assert buf.symmetric and buf.nbytes == need + NRANKS - 1
        work = work_view(buf, need)
        for name, a, b in (("transpose_x_to_y", 0, 1), ("transpose_y_to_z", 1, 2), ("transpose_z_to_y", 2, 1), ("transpose_y_to_x", 1, 0)):
            ia, ib = g.get_pencil_info(a), g.get_pencil_info(b)
            for _ in range(3):  # again through the same buffer
                y = getattr(g, name)(cp.asarray(make(ia, GDIMS, DataType.DOUBLE)), cp.zeros(ib.array_shape), work=work)
                assert np.array_equal(y.get(), make(ib, GDIMS, DataType.DOUBLE)), name
        info = g.get_pencil_info(0, (1, 1, 1))
        hw = work_view(buf, g.get_halo_workspace_size(0, (1, 1, 1)) * 8)
        arr = cp.asarray(make(info, GDIMS, DataType.DOUBLE))
        for dim in range(3):
            g.update_halos_x(arr, (1, 1, 1), (True, True, True), dim, work=hw)
        assert np.array_equal(arr.get(), halo_expected(info, GDIMS, (True, True, True), DataType.DOUBLE))
        handle.free(g, buf)
        with pytest.raises(cudecomp.InvalidUsageError, match="freed"):
            handle.free(g, buf)
        with pytest.raises(cudecomp.InvalidUsageError, match="freed"):
            _ = buf.__cuda_array_interface__


def test_ordinary_grids_get_ordinary_buffers(handle: cudecomp.Handle) -> None:
    with handle.create_grid(config(TransposeCommBackend.NCCL, HaloCommBackend.NCCL)) as g:
        buf = handle.malloc(g, 1024)
        assert not buf.symmetric
        handle.free(g, buf)


def test_unfreed_symmetric_buffers_go_at_finalize(comm: MPI.Comm) -> None:
    h = cudecomp.Handle(comm)
    g = h.create_grid(config(TransposeCommBackend.NVSHMEM, HaloCommBackend.NVSHMEM))
    kept = [h.malloc(g, 1 << 20) for _ in range(3)]
    h.free(g, kept[1])
    del kept[2]  # dropping one frees nothing (that would be collective) ...
    g.destroy()
    h.finalize()  # ... finalize frees what is left, collectively
    with pytest.raises(cudecomp.InvalidUsageError, match="freed"):
        _ = kept[0].__cuda_array_interface__
    round_trip_on_new_handle(comm)


def round_trip_on_new_handle(comm: MPI.Comm) -> None:
    with cudecomp.Handle(comm) as h, h.create_grid(config(TransposeCommBackend.NVSHMEM, HaloCommBackend.NVSHMEM)) as g:
        round_trip(g)


@pytest.mark.skipif(NRANKS < 2, reason="needs two ranks")
def test_symmetric_buffers_must_agree(handle: cudecomp.Handle) -> None:
    import cupy as cp

    with handle.create_grid(config(TransposeCommBackend.NVSHMEM, HaloCommBackend.NVSHMEM)) as g:
        need = g.get_transpose_workspace_size() * 8
        a, b = handle.malloc(g, need + 8), handle.malloc(g, need + 8)  # room for the shifted view below
        ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
        x = cp.asarray(make(ia, GDIMS, DataType.DOUBLE))
        rank = MPI.COMM_WORLD.rank
        mixes = [
            work_view(a, need) if rank == 0 else cp.zeros(need, np.uint8),  # lent on one rank only
            work_view(a if rank == 0 else b, need),  # different buffers
            work_view(a, need, 8 * (rank == 0)),  # different places in one buffer
        ]
        for w in mixes:
            with pytest.raises(cudecomp.InvalidUsageError, match="same Handle.malloc buffer"):
                g.transpose_x_to_y(x, cp.zeros(ib.array_shape), work=w)
        with pytest.raises(cudecomp.InvalidUsageError, match="every rank must free the same"):
            handle.free(g, a if rank == 0 else b)
        y = g.transpose_x_to_y(x, cp.zeros(ib.array_shape), work=work_view(b, need))  # still works
        assert np.array_equal(y.get(), make(ib, GDIMS, DataType.DOUBLE))
        handle.free(g, a)
        handle.free(g, b)
