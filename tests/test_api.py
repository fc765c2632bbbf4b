"""The public Python surface: names, enums, config objects, queries and every error path.

Each error test checks the exception class and that the handle keeps working afterwards.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_cpu_variant, requires_data_path
from cudecomp import DataType, HaloCommBackend, TransposeCommBackend
from oracle import device, factor_pairs, make, to_host, variant_halo_backends, variant_transpose_backends, xp

NRANKS = MPI.COMM_WORLD.size
PDIMS = factor_pairs(NRANKS)[-1]  # (N, 1)
GDIMS = (9, 10, 11)


def base_config(**overrides: object) -> cudecomp.GridDescConfig:
    cfg = cudecomp.GridDescConfig()
    cfg.gdims = GDIMS
    cfg.pdims = PDIMS
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


@pytest.fixture
def grid(handle: cudecomp.Handle) -> Iterator[cudecomp.GridDesc]:
    g = handle.create_grid(base_config())
    yield g
    try:
        g.destroy()
    except cudecomp.InvalidUsageError:
        pass


def still_works(handle: cudecomp.Handle) -> None:
    """A full X->Y transpose on a fresh grid succeeds and is right."""
    g = handle.create_grid(base_config())
    try:
        ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
        out = g.transpose_x_to_y(device(make(ia, GDIMS, DataType.DOUBLE)), xp.zeros(ib.array_shape))
        assert np.array_equal(to_host(out), make(ib, GDIMS, DataType.DOUBLE))
    finally:
        g.destroy()


# ---------------------------------------------------------------- names and values


def test_public_names() -> None:
    for name in cudecomp.__all__:
        assert hasattr(cudecomp, name), name
    assert isinstance(cudecomp.CPU_ONLY, bool)
    assert cudecomp.__version__.endswith("+cpu") == cudecomp.CPU_ONLY


def test_enum_values() -> None:
    assert [int(d) for d in DataType] == [-1, -2, -3, -4]
    assert [int(b) for b in TransposeCommBackend] == list(range(1, 10))
    assert [int(b) for b in HaloCommBackend] == list(range(1, 7))
    assert int(cudecomp.AutotuneGridMode.HALO) == 1
    assert int(cudecomp.RankOrder.COL_MAJOR) == 2
    assert int(cudecomp.Result.NVML_ERROR) == 9


def test_backend_strings() -> None:
    expect = [
        "MPI_P2P",
        "MPI_P2P (pipelined)",
        "MPI_A2A",
        "NCCL",
        "NCCL (pipelined)",
        "NVSHMEM",
        "NVSHMEM (pipelined)",
        "NVSHMEM_SM",
        "DIRECT",
    ]
    assert [cudecomp.transpose_comm_backend_to_string(b) for b in TransposeCommBackend] == expect
    assert cudecomp.transpose_comm_backend_to_string(0) == "ERROR"
    expect = ["MPI", "MPI (blocking)", "NCCL", "NVSHMEM", "NVSHMEM (blocking)", "DIRECT"]
    assert [cudecomp.halo_comm_backend_to_string(b) for b in HaloCommBackend] == expect
    assert cudecomp.halo_comm_backend_to_string(42) == "ERROR"
    with pytest.raises(TypeError):
        cudecomp.transpose_comm_backend_to_string("NCCL")  # type: ignore[arg-type]


def test_data_type_sizes() -> None:
    assert [cudecomp.get_data_type_size(d) for d in DataType] == [4, 8, 8, 16]
    for bad in (np.float32, "float32", -1, None):
        with pytest.raises(TypeError):
            cudecomp.get_data_type_size(bad)  # type: ignore[arg-type]


def test_exception_hierarchy() -> None:
    assert issubclass(cudecomp.CudecompError, RuntimeError)
    assert issubclass(cudecomp.InvalidUsageError, ValueError)
    assert issubclass(cudecomp.NotSupportedError, NotImplementedError)
    for cls, code in [
        (cudecomp.InvalidUsageError, 1),
        (cudecomp.NotSupportedError, 2),
        (cudecomp.InternalError, 3),
        (cudecomp.CudaError, 4),
        (cudecomp.MpiError, 6),
        (cudecomp.NcclError, 7),
        (cudecomp.NvshmemError, 8),
    ]:
        assert issubclass(cls, cudecomp.CudecompError)
        assert cls("x").result == code


# ---------------------------------------------------------------- config objects


def test_config_defaults() -> None:
    c = cudecomp.GridDescConfig()
    assert c.gdims.tolist() == [0, 0, 0] and c.pdims.tolist() == [0, 0]
    assert c.rank_order is cudecomp.RankOrder.DEFAULT
    assert c.transpose_comm_backend is TransposeCommBackend.MPI_P2P
    assert c.halo_comm_backend is HaloCommBackend.MPI
    assert c.transpose_mem_order.tolist() == [[-1] * 3] * 3
    assert not c.transpose_axis_contiguous.any()
    o = cudecomp.GridDescAutotuneOptions()
    assert (o.n_warmup_trials, o.n_trials, o.dtype, o.skip_threshold) == (3, 5, DataType.DOUBLE, 0.0)
    assert o.allow_uneven_decompositions is True and o.autotune_transpose_backend is False
    assert o.transpose_op_weights.tolist() == [1.0] * 4
    assert o.transpose_input_halo_extents.shape == (4, 3)
    assert o.grid_mode is cudecomp.AutotuneGridMode.TRANSPOSE


def test_config_views_and_copies() -> None:
    c = cudecomp.GridDescConfig()
    view = c.pdims
    view[:] = 2, 3
    assert c.pdims.tolist() == [2, 3]
    c.gdims = [4, 5, 6]
    c.transpose_mem_order[1] = (2, 0, 1)
    d = c.copy()
    assert d == c
    d.gdims[0] = 7
    assert d != c and c.gdims[0] == 4
    assert "gdims=[4, 5, 6]" in repr(c)
    c.gdims = np.array([1, 2, 3], dtype=np.int64)
    assert c.gdims.dtype == np.int32


@pytest.mark.parametrize(
    "field, value, exc",
    [
        ("gdims", (True, 6, 5), TypeError),
        ("gdims", (6, False, 5), TypeError),
        ("gdims", [np.True_, 6, 5], TypeError),
        ("gdims", (4.0, 5, 6), TypeError),
        ("gdims", (4.9, 5, 6), TypeError),
        ("gdims", np.array([4.0, 5, 6]), TypeError),
        ("gdims", np.array([True, True, True]), TypeError),
        ("gdims", (1 + 2j, 5, 6), TypeError),
        ("gdims", None, TypeError),
        ("gdims", {"x": 1}, TypeError),
        ("gdims", b"abc", TypeError),
        ("gdims", (64, (64,), 64), TypeError),
        ("gdims", (2**31, 1, 1), cudecomp.InvalidUsageError),
        ("gdims", (-(2**31) - 1, 1, 1), cudecomp.InvalidUsageError),
        ("pdims", (True, 1), TypeError),
        ("pdims", (1.0, 1), TypeError),
        ("pdims", (1, 2, 3), cudecomp.InvalidUsageError),
        ("gdims_dist", (0.5, 0, 0), TypeError),
        ("transpose_axis_contiguous", (2, 0, 0), TypeError),
        ("transpose_axis_contiguous", (0.0, 1, 0), TypeError),
        ("transpose_axis_contiguous", ("yes", 1, 0), TypeError),
        ("transpose_mem_order", [[0.0, 1, 2]] * 3, TypeError),
        ("transpose_mem_order", [[True, 1, 2]] * 3, TypeError),
        ("transpose_mem_order", [0, 1, 2], cudecomp.InvalidUsageError),
        ("transpose_comm_backend", 9, TypeError),
        ("transpose_comm_backend", "DIRECT", TypeError),
        ("halo_comm_backend", TransposeCommBackend.MPI_P2P, TypeError),
        ("rank_order", 1, TypeError),
        ("gdims", (1, 2), cudecomp.InvalidUsageError),
        ("gdims", (1, 2, 3, 4), cudecomp.InvalidUsageError),
        ("gdims", (1.5, 2, 3), TypeError),
        ("gdims", "abc", TypeError),
        ("gdims", 3, TypeError),
        ("gdims", (2**40, 1, 1), cudecomp.InvalidUsageError),
        ("transpose_axis_contiguous", (1.0, 0, 0), TypeError),
        ("transpose_mem_order", (0, 1, 2), cudecomp.InvalidUsageError),
        ("transpose_comm_backend", 1, TypeError),
        ("transpose_comm_backend", HaloCommBackend.MPI, TypeError),
        ("halo_comm_backend", "MPI", TypeError),
        ("rank_order", None, TypeError),
    ],
)
def test_config_field_errors(field: str, value: object, exc: type[Exception]) -> None:
    c = cudecomp.GridDescConfig()
    before = c.copy()
    with pytest.raises(exc):
        setattr(c, field, value)
    assert c == before


@pytest.mark.parametrize(
    "field, value, exc",
    [
        ("n_trials", 2.5, TypeError),
        ("n_trials", True, TypeError),
        ("skip_threshold", "x", TypeError),
        ("autotune_transpose_backend", 1, TypeError),
        ("dtype", np.float64, TypeError),
        ("transpose_op_weights", (1, 2, 3), cudecomp.InvalidUsageError),
        ("halo_periods", (2, 0, 0), TypeError),
    ],
)
def test_options_field_errors(field: str, value: object, exc: type[Exception]) -> None:
    o = cudecomp.GridDescAutotuneOptions()
    with pytest.raises(exc):
        setattr(o, field, value)


# ---------------------------------------------------------------- handle and grid lifecycle


@pytest.mark.mpi
@requires_data_path()
def test_handle_properties_and_context_manager(comm: MPI.Comm) -> None:
    with cudecomp.Handle(comm) as h:
        assert (h.rank, h.nranks) == (comm.rank, comm.size)
        still_works(h)
        assert "live" in repr(h)
    with pytest.raises(cudecomp.InvalidUsageError):
        h.create_grid(base_config())
    with pytest.raises(cudecomp.InvalidUsageError):
        h.finalize()


def test_handle_argument_errors(comm: MPI.Comm) -> None:
    for bad in (None, 0, "world", comm.py2f()):
        with pytest.raises(TypeError):
            cudecomp.Handle(bad)  # type: ignore[arg-type]
    with pytest.raises(cudecomp.InvalidUsageError):
        cudecomp.Handle(MPI.COMM_NULL)


@pytest.mark.mpi
@requires_data_path()
def test_handle_on_sub_communicator(comm: MPI.Comm) -> None:
    sub = comm.Split(comm.rank % 2, comm.rank)
    with cudecomp.Handle(sub) as h:
        assert h.nranks == sub.size
        cfg = base_config()
        cfg.pdims = (sub.size, 1)
        g = h.create_grid(cfg)
        g.destroy()
    sub.Free()


def test_grid_desc_not_constructible() -> None:
    with pytest.raises(TypeError):
        cudecomp.GridDesc()  # type: ignore[call-arg]


def test_create_grid_writes_back_resolved_values(handle: cudecomp.Handle) -> None:
    cfg = base_config()
    g = handle.create_grid(cfg)
    assert cfg.rank_order is cudecomp.RankOrder.ROW_MAJOR
    assert tuple(cfg.pdims) == PDIMS
    resolved = g.config
    assert resolved == cfg and resolved is not cfg
    assert resolved.gdims_dist.tolist() == [0, 0, 0]
    g.destroy()


@pytest.mark.mpi
@requires_data_path()
def test_use_after_destroy_and_finalize(comm: MPI.Comm) -> None:
    handle = cudecomp.Handle(comm)
    g = handle.create_grid(base_config())
    g.destroy()
    for call in (g.destroy, lambda: g.get_pencil_info(0), g.get_transpose_workspace_size, lambda: g.config):
        with pytest.raises(cudecomp.InvalidUsageError):
            call()
    assert "released" in repr(g)
    still_works(handle)
    g2 = handle.create_grid(base_config())
    handle.finalize()
    with pytest.raises(cudecomp.InvalidUsageError):
        g2.get_pencil_info(0)
    with pytest.raises(cudecomp.InvalidUsageError):
        g2.destroy()


def test_resource_warning_for_leaked_grid(handle: cudecomp.Handle) -> None:
    g = handle.create_grid(base_config())
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        del g
        gc.collect()
    assert any(issubclass(x.category, ResourceWarning) for x in w)


def bad_configs() -> list[tuple[dict[str, object], type[Exception]]]:
    return [
        ({"pdims": (NRANKS + 1, 1)}, cudecomp.InvalidUsageError),
        ({"pdims": (0, 0)}, cudecomp.InvalidUsageError),
        ({"gdims": (0, 10, 11)}, cudecomp.InvalidUsageError),
        ({"gdims_dist": (10, 10, 11)}, cudecomp.InvalidUsageError),
        ({"gdims_dist": (-1, 10, 11)}, cudecomp.InvalidUsageError),
        ({"transpose_mem_order": [[0, 1, 2], [-1, -1, -1], [-1, -1, -1]]}, cudecomp.InvalidUsageError),
        ({"transpose_mem_order": [[0, 1, 1]] * 3}, cudecomp.InvalidUsageError),
    ]


@pytest.mark.parametrize("overrides, exc", bad_configs())
def test_create_grid_errors(handle: cudecomp.Handle, overrides: dict[str, object], exc: type[Exception]) -> None:
    cfg = base_config()
    for k, v in overrides.items():
        getattr(cfg, k)[...] = v
    with pytest.raises(exc):
        handle.create_grid(cfg)
    still_works(handle)


def test_create_grid_type_errors(handle: cudecomp.Handle) -> None:
    with pytest.raises(TypeError):
        handle.create_grid({"gdims": GDIMS})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        handle.create_grid(base_config(), autotune_options=base_config())  # type: ignore[arg-type]
    still_works(handle)


@requires_cpu_variant()
@pytest.mark.parametrize("backend", [TransposeCommBackend.NCCL, TransposeCommBackend.NCCL_PL, TransposeCommBackend.NVSHMEM])
def test_cpu_variant_rejects_gpu_transpose_backends(handle: cudecomp.Handle, backend: TransposeCommBackend) -> None:
    with pytest.raises(cudecomp.NotSupportedError):
        handle.create_grid(base_config(transpose_comm_backend=backend))
    still_works(handle)


@requires_cpu_variant()
def test_cpu_variant_rejects_gpu_halo_backends(handle: cudecomp.Handle) -> None:
    with pytest.raises(cudecomp.NotSupportedError):
        handle.create_grid(base_config(halo_comm_backend=HaloCommBackend.NCCL))
    still_works(handle)


def quick_options(**kw: object) -> cudecomp.GridDescAutotuneOptions:
    o = cudecomp.GridDescAutotuneOptions()
    o.n_warmup_trials, o.n_trials = 1, 2
    for k, v in kw.items():
        setattr(o, k, v)
    return o


@pytest.mark.mpi
def test_autotune_process_grid(handle: cudecomp.Handle, capfd: pytest.CaptureFixture[str]) -> None:
    cfg = base_config()
    cfg.pdims = (0, 0)
    g = handle.create_grid(cfg, quick_options())
    assert cfg.pdims[0] * cfg.pdims[1] == NRANKS
    assert tuple(g.config.pdims) == tuple(cfg.pdims)
    assert cfg.transpose_comm_backend is TransposeCommBackend.MPI_P2P  # not searched
    out = capfd.readouterr().out
    if MPI.COMM_WORLD.rank == 0:
        assert "CUDECOMP: Running transpose autotuning..." in out and "CUDECOMP: SELECTED: grid:" in out
    g.destroy()
    still_works(handle)


@pytest.mark.mpi
def test_autotune_backends_and_halo_mode(handle: cudecomp.Handle) -> None:
    cfg = base_config()
    g = handle.create_grid(cfg, quick_options(autotune_transpose_backend=True, autotune_halo_backend=True, halo_extents=(1, 1, 1)))
    assert cfg.transpose_comm_backend in variant_transpose_backends()
    assert cfg.halo_comm_backend in variant_halo_backends()
    g.destroy()
    cfg = base_config()
    cfg.pdims = (0, 0)
    g = handle.create_grid(cfg, quick_options(grid_mode=cudecomp.AutotuneGridMode.HALO, halo_extents=(1, 1, 1), halo_axis=2))
    assert cfg.pdims[0] * cfg.pdims[1] == NRANKS
    g.destroy()


@pytest.mark.mpi
@requires_data_path()
@pytest.mark.parametrize(
    "spec, expect",
    [
        ("MPI_A2A", "MPI_A2A"),
        ("^MPI_P2P,MPI_P2P_PL,NCCL,NCCL_PL,DIRECT,NVSHMEM,NVSHMEM_PL,NVSHMEM_SM", "MPI_A2A"),
        ("MPI_P2P_PL", "MPI_P2P_PL"),
    ],
)
def test_autotune_backend_filter(comm: MPI.Comm, monkeypatch: pytest.MonkeyPatch, spec: str, expect: str) -> None:
    # Settings are read when a handle is created.
    monkeypatch.setenv("CUDECOMP_AUTOTUNE_TRANSPOSE_BACKENDS", spec)
    with cudecomp.Handle(comm) as h:
        cfg = base_config()
        h.create_grid(cfg, quick_options(autotune_transpose_backend=True)).destroy()
    assert cfg.transpose_comm_backend is TransposeCommBackend[expect]


@pytest.mark.mpi
@requires_data_path()
@pytest.mark.parametrize(
    "var, value",
    [
        ("CUDECOMP_AUTOTUNE_TRANSPOSE_BACKENDS", "MPI_P2P,BOGUS"),
        ("CUDECOMP_AUTOTUNE_TRANSPOSE_BACKENDS", ","),
        ("CUDECOMP_AUTOTUNE_P_ROW_RANGE", "3,1"),
        ("CUDECOMP_AUTOTUNE_P_ROW_RANGE", "x"),
    ],
)
def test_autotune_filter_errors(comm: MPI.Comm, monkeypatch: pytest.MonkeyPatch, var: str, value: str) -> None:
    """A bad filter is refused when the handle is created, on every rank; a later handle works."""
    monkeypatch.setenv(var, value)
    with pytest.raises(cudecomp.InvalidUsageError, match=var):
        cudecomp.Handle(comm)
    monkeypatch.delenv(var)
    with cudecomp.Handle(comm) as h:
        still_works(h)


@pytest.mark.mpi
@requires_data_path()
def test_autotune_filter_leaving_no_grid(comm: MPI.Comm, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDECOMP_AUTOTUNE_P_COL_RANGE", "1000,2000")
    with cudecomp.Handle(comm) as h:
        cfg = base_config()
        cfg.pdims = (0, 0)
        with pytest.raises(cudecomp.InvalidUsageError, match="leave no process grid"):
            h.create_grid(cfg, quick_options(autotune_transpose_backend=True))
        still_works(h)


@pytest.mark.mpi
@requires_data_path()
@pytest.mark.parametrize("value", ["0", "-4096", "32MiB"])
def test_pipeline_slice_bytes_errors(comm: MPI.Comm, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CUDECOMP_PIPELINE_SLICE_BYTES", value)
    with pytest.raises(cudecomp.InvalidUsageError, match="CUDECOMP_PIPELINE_SLICE_BYTES"):
        cudecomp.Handle(comm)
    monkeypatch.delenv("CUDECOMP_PIPELINE_SLICE_BYTES")
    with cudecomp.Handle(comm) as h:
        still_works(h)


@pytest.mark.mpi
@requires_data_path()
def test_empty_settings_mean_unset(comm: MPI.Comm, monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable set to nothing (``VAR=``) leaves its default, as if unset."""
    for var in ("CUDECOMP_PIPELINE_SLICE_BYTES", "CUDECOMP_AUTOTUNE_TRANSPOSE_BACKENDS", "CUDECOMP_SINGLE_COPY"):
        monkeypatch.setenv(var, "  ")
    with cudecomp.Handle(comm) as h:
        still_works(h)


@pytest.mark.mpi(min_ranks=2)
@requires_data_path()
@pytest.mark.parametrize("other", ["65536", "bogus"])
def test_pipeline_slice_bytes_must_agree(comm: MPI.Comm, monkeypatch: pytest.MonkeyPatch, other: str) -> None:
    monkeypatch.setenv("CUDECOMP_PIPELINE_SLICE_BYTES", other if comm.rank == 1 else "4096")
    # Differing values name the variable and both; a bad value on rank 1 is rank 1's error.
    differ = "CUDECOMP_PIPELINE_SLICE_BYTES is 4096 on rank 0 and 65536 on rank 1"
    want = differ if other == "65536" else "CUDECOMP_PIPELINE_SLICE_BYTES"
    with pytest.raises(cudecomp.InvalidUsageError, match=want):
        cudecomp.Handle(comm)
    monkeypatch.delenv("CUDECOMP_PIPELINE_SLICE_BYTES")
    with cudecomp.Handle(comm) as h:
        still_works(h)


@pytest.mark.mpi
@pytest.mark.skipif(not cudecomp.CPU_ONLY, reason="host copy threads are the CPU variant's")
@pytest.mark.parametrize("bad", ["0", "four", "-2"])
def test_host_threads_errors(comm: MPI.Comm, monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    """A bad CUDECOMP_HOST_THREADS on one rank raises on every rank; a later handle works."""
    monkeypatch.setenv("CUDECOMP_HOST_THREADS", bad if comm.rank == comm.size - 1 else "2")
    with pytest.raises(cudecomp.InvalidUsageError, match="CUDECOMP_HOST_THREADS"):
        cudecomp.Handle(comm)
    monkeypatch.setenv("CUDECOMP_HOST_THREADS", "3")
    with cudecomp.Handle(comm) as h:
        still_works(h)


@pytest.mark.mpi
def test_autotune_no_valid_grid(handle: cudecomp.Handle) -> None:
    if NRANKS == 1:
        pytest.skip("one rank always has a valid grid")
    cfg = base_config()
    cfg.pdims = (0, 0)
    cfg.gdims = (1, 1, 1)  # every multi-rank grid leaves some rank without cells
    with pytest.raises(cudecomp.NotSupportedError, match="no valid decomposition"):
        handle.create_grid(cfg, quick_options())
    still_works(handle)


@pytest.mark.mpi(min_ranks=2)
def test_mismatched_configs_raise_on_every_rank(handle: cudecomp.Handle, comm: MPI.Comm) -> None:
    cfg = base_config()
    if comm.rank == 1:
        cfg.gdims[2] = 12
    # Every rank names the first field that differs and the values of rank 0 and rank 1.
    want = rf"gdims is \[{GDIMS[0]}, {GDIMS[1]}, {GDIMS[2]}\] on rank 0 and \[{GDIMS[0]}, {GDIMS[1]}, 12\] on rank 1"
    with pytest.raises(cudecomp.InvalidUsageError, match=want):
        handle.create_grid(cfg)
    still_works(handle)


# ---------------------------------------------------------------- queries


@pytest.mark.mpi
def test_pencil_info_fields(grid: cudecomp.GridDesc) -> None:
    info = grid.get_pencil_info(1, (1, 2, 0), (0, 0, 3))
    assert info.halo_extents == (1, 2, 0) and info.padding == (0, 0, 3)
    assert info.array_shape == tuple(reversed(info.shape))
    assert info.size == int(np.prod(info.shape))
    assert info == grid.get_pencil_info(1, (1, 2, 0), (0, 0, 3))
    assert "PencilInfo(" in repr(info)
    with pytest.raises(AttributeError):
        info.shape = (1, 1, 1)  # type: ignore[misc]


@pytest.mark.parametrize(
    "args, exc",
    [
        ((3,), cudecomp.InvalidUsageError),
        ((-1,), cudecomp.InvalidUsageError),
        (("x",), TypeError),
        ((True,), TypeError),
        ((0, (-1, 0, 0)), cudecomp.InvalidUsageError),
        ((0, (1, 1)), cudecomp.InvalidUsageError),
        ((0, "abc"), TypeError),
        ((0, (1.0, 0, 0)), TypeError),
        ((0, None, (0, -2, 0)), cudecomp.InvalidUsageError),
    ],
)
def test_pencil_info_errors(handle: cudecomp.Handle, grid: cudecomp.GridDesc, args: tuple, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        grid.get_pencil_info(*args)
    still_works(handle)


@pytest.mark.mpi
def test_workspace_sizes(grid: cudecomp.GridDesc, handle: cudecomp.Handle) -> None:
    assert grid.get_transpose_workspace_size() > 0
    assert grid.get_halo_workspace_size(0, (1, 1, 1)) >= 0
    with pytest.raises(cudecomp.InvalidUsageError):
        grid.get_halo_workspace_size(0, None)
    with pytest.raises(cudecomp.InvalidUsageError):
        grid.get_halo_workspace_size(4, (1, 1, 1))
    still_works(handle)


@pytest.mark.mpi
def test_shifted_rank(grid: cudecomp.GridDesc, handle: cudecomp.Handle, comm: MPI.Comm) -> None:
    assert grid.get_shifted_rank(0, 0, 0, False) == comm.rank
    assert grid.get_shifted_rank(0, 0, 1, False) == -1
    assert grid.get_shifted_rank(0, 0, 1, True) == comm.rank
    up = grid.get_shifted_rank(0, 1, 1, True)
    assert up == (comm.rank + 1) % NRANKS  # pdims (N, 1): Y is split over the ranks
    for args in ((0, 3, 1, False), (3, 0, 1, False)):
        with pytest.raises(cudecomp.InvalidUsageError):
            grid.get_shifted_rank(*args)
    with pytest.raises(TypeError):
        grid.get_shifted_rank(0, 1, 1.5, False)
    assert grid.get_shifted_rank(0, 1, 1, 1) == up  # 0/1 as in the halo periods
    for bad in (2, "yes", None):
        with pytest.raises(TypeError, match="periodic"):
            grid.get_shifted_rank(0, 1, 1, bad)  # type: ignore[arg-type]
    still_works(handle)


@pytest.mark.mpi
@requires_cpu_variant()
def test_malloc_and_free(handle: cudecomp.Handle, grid: cudecomp.GridDesc, comm: MPI.Comm) -> None:
    buf = handle.malloc(grid, 1024)
    assert buf.nbytes == 1024 and buf.dtype == np.uint8
    handle.free(grid, buf)
    handle.free(grid, None)
    for bad in ([1], b"xy", memoryview(b"xy")):
        with pytest.raises(TypeError, match="buffer"):
            handle.free(grid, bad)
    for n in (0, -5):
        with pytest.raises(cudecomp.InvalidUsageError):
            handle.malloc(grid, n)
    with pytest.raises(TypeError):
        handle.malloc(grid, 1.5)
    with cudecomp.Handle(comm) as other:
        with pytest.raises(cudecomp.InvalidUsageError):
            other.malloc(grid, 16)
    still_works(handle)


# ---------------------------------------------------------------- transpose argument errors


def pencils(grid: cudecomp.GridDesc) -> tuple[np.ndarray, np.ndarray]:
    ia, ib = grid.get_pencil_info(0), grid.get_pencil_info(1)
    return make(ia, GDIMS, DataType.DOUBLE), np.zeros(ib.array_shape)


def transpose_errors() -> list[tuple[str, Callable[[cudecomp.GridDesc, np.ndarray, np.ndarray], object], type[Exception]]]:
    f32 = np.float32
    return [
        ("list input", lambda g, x, y: g.transpose_x_to_y(x.tolist(), y), TypeError),
        ("numpy dtype", lambda g, x, y: g.transpose_x_to_y(x, y, dtype=np.float64), TypeError),
        ("string dtype", lambda g, x, y: g.transpose_x_to_y(x, y, dtype="float64"), TypeError),
        ("int dtype", lambda g, x, y: g.transpose_x_to_y(x, y, dtype=-2), TypeError),
        ("dtype mismatch", lambda g, x, y: g.transpose_x_to_y(x, y, dtype=DataType.FLOAT), cudecomp.InvalidUsageError),
        ("out dtype", lambda g, x, y: g.transpose_x_to_y(x, y.astype(f32)), cudecomp.InvalidUsageError),
        ("wrong shape", lambda g, x, y: g.transpose_x_to_y(x, y.reshape(-1)[None]), cudecomp.InvalidUsageError),
        ("transposed input", lambda g, x, y: g.transpose_x_to_y(np.ascontiguousarray(x.T), y), cudecomp.InvalidUsageError),
        ("2-D", lambda g, x, y: g.transpose_x_to_y(x.reshape(x.shape[0], -1), y), cudecomp.InvalidUsageError),
        ("strided", lambda g, x, y: g.transpose_x_to_y(np.repeat(x, 2, axis=2)[:, :, ::2], y), cudecomp.InvalidUsageError),
        ("big endian", lambda g, x, y: g.transpose_x_to_y(x.astype(">f8"), y), cudecomp.InvalidUsageError),
        ("int32", lambda g, x, y: g.transpose_x_to_y(x.astype(np.int32), y.astype(np.int32)), cudecomp.InvalidUsageError),
        ("read-only out", lambda g, x, y: g.transpose_x_to_y(x, readonly(y)), cudecomp.InvalidUsageError),
        ("opaque no dtype", lambda g, x, y: g.transpose_x_to_y(x.view("V8"), y), cudecomp.InvalidUsageError),
        (
            "opaque wrong size",
            lambda g, x, y: g.transpose_x_to_y(x.view("V8"), y, dtype=DataType.DOUBLE_COMPLEX),
            cudecomp.InvalidUsageError,
        ),
        ("small work", lambda g, x, y: g.transpose_x_to_y(x, y, work=np.zeros(8, np.uint8)), cudecomp.InvalidUsageError),
        (
            "read-only work",
            lambda g, x, y: g.transpose_x_to_y(x, y, work=readonly(np.zeros(1 << 16, np.uint8))),
            cudecomp.InvalidUsageError,
        ),
        ("work list", lambda g, x, y: g.transpose_x_to_y(x, y, work=[0] * 100), TypeError),
        ("halo wrong length", lambda g, x, y: g.transpose_x_to_y(x, y, input_halo_extents=(1, 1)), cudecomp.InvalidUsageError),
        ("negative halo", lambda g, x, y: g.transpose_x_to_y(x, y, output_halo_extents=(0, -1, 0)), cudecomp.InvalidUsageError),
        ("float padding", lambda g, x, y: g.transpose_x_to_y(x, y, input_padding=(0.5, 0, 0)), TypeError),
        ("halo shape mismatch", lambda g, x, y: g.transpose_x_to_y(x, y, input_halo_extents=(1, 0, 0)), cudecomp.InvalidUsageError),
        ("partial overlap", lambda g, x, y: partial_overlap(g, x), cudecomp.InvalidUsageError),
    ]


def readonly(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def partial_overlap(g: cudecomp.GridDesc, x: np.ndarray) -> object:
    ib = g.get_pencil_info(1)
    buf = np.zeros(x.size + int(np.prod(ib.array_shape)) + 1)
    buf[: x.size] = x.reshape(-1)
    return g.transpose_x_to_y(buf[: x.size].reshape(x.shape), buf[1 : 1 + ib.size].reshape(ib.array_shape))


@requires_cpu_variant()
@pytest.mark.parametrize("name, call, exc", transpose_errors(), ids=[t[0] for t in transpose_errors()])
def test_transpose_argument_errors(
    handle: cudecomp.Handle,
    grid: cudecomp.GridDesc,
    name: str,
    call: Callable[[cudecomp.GridDesc, np.ndarray, np.ndarray], object],
    exc: type[Exception],
) -> None:
    x, y = pencils(grid)
    with pytest.raises(exc):
        call(grid, x, y)
    still_works(handle)
    # The same grid still transposes correctly after the error.
    assert np.array_equal(grid.transpose_x_to_y(x, y), make(grid.get_pencil_info(1), GDIMS, DataType.DOUBLE))


@pytest.mark.mpi
@requires_cpu_variant()
def test_empty_pencil_transposes_not_supported(handle: cudecomp.Handle, comm: MPI.Comm) -> None:
    cfg = base_config()
    cfg.gdims = (NRANKS + 3, max(NRANKS - 1, 1), 5)  # N-1 rows of Y over N ranks: the last owns none
    cfg.pdims = (NRANKS, 1)
    g = handle.create_grid(cfg)
    ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
    if NRANKS > 1:
        assert (ia.size == 0) == (comm.rank == NRANKS - 1)
        with pytest.raises(cudecomp.NotSupportedError):
            g.transpose_x_to_y(np.zeros(ia.array_shape), np.zeros(ib.array_shape))
    g.destroy()
    still_works(handle)


@requires_cpu_variant()
def test_streams_are_accepted_and_ignored(grid: cudecomp.GridDesc) -> None:
    x, y = pencils(grid)
    ix, iy = grid.get_pencil_info(0), grid.get_pencil_info(1)
    for s in (None, 0, 7):
        y[...] = -1.0
        assert grid.transpose_x_to_y(x, y, stream=s) is y
        assert np.array_equal(y, make(iy, GDIMS, DataType.DOUBLE)), f"stream={s}"
        assert np.array_equal(x, make(ix, GDIMS, DataType.DOUBLE)), f"stream={s}: input changed"


def test_host_threads_beyond_a_few_per_core_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """5000 copy threads took a transpose from 0.23 s to 30 s: refused at the first host operation."""
    if not cudecomp.CPU_ONLY:
        pytest.skip("GPU handles copy on the device")
    monkeypatch.setenv("CUDECOMP_HOST_THREADS", "5000")
    with cudecomp.Handle(MPI.COMM_WORLD) as h:
        cfg = cudecomp.GridDescConfig()
        cfg.gdims, cfg.pdims = (8, 8, 8), (1, MPI.COMM_WORLD.size)
        with pytest.raises(cudecomp.InvalidUsageError, match="CUDECOMP_HOST_THREADS: expected at most .* threads .* got 5000"):
            h.create_grid(cfg)


@requires_data_path()
def test_an_autotune_filter_that_leaves_nothing_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = (8, 8, 8), (1, MPI.COMM_WORLD.size)
    opts = cudecomp.GridDescAutotuneOptions()
    opts.autotune_transpose_backend = True
    # The filter keeps MPI_P2P, which the options then disable.
    monkeypatch.setenv("CUDECOMP_AUTOTUNE_TRANSPOSE_BACKENDS", "MPI_P2P")
    opts.disable_mpi_backends = True
    message = r'CUDECOMP_AUTOTUNE_TRANSPOSE_BACKENDS keeps \["MPI_P2P"\], and the options disable_mpi_backends=true'
    with cudecomp.Handle(MPI.COMM_WORLD) as h, pytest.raises(cudecomp.InvalidUsageError, match=message):
        h.create_grid(cfg, opts)
    # A filter that keeps nothing this handle can run.
    monkeypatch.setenv("CUDECOMP_AUTOTUNE_TRANSPOSE_BACKENDS", "NVSHMEM_SM")
    opts.disable_mpi_backends = False
    with cudecomp.Handle(MPI.COMM_WORLD) as h:
        if cudecomp.CPU_ONLY:
            with pytest.raises(cudecomp.InvalidUsageError, match="CUDECOMP_AUTOTUNE_TRANSPOSE_BACKENDS keeps none of them"):
                h.create_grid(cfg, opts)
