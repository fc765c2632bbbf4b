"""Several fields in one exchange: a transpose or halo update of a batch of pencils (a
leading batch axis) equals one operation per field, bit for bit, on every backend, layout
and process grid; and what a batch may not be raises on every rank.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import handle_with, requires_data_path
from cudecomp import DataType
from oracle import TRANSPOSES, device, factor_pairs, interior, make, to_host, variant_halo_backends, variant_transpose_backends, xp

pytestmark = [pytest.mark.mpi, requires_data_path()]

K = 3
GDIMS = (9, 10, 7)
OPS = TRANSPOSES
NRANKS = MPI.COMM_WORLD.size
SENTINEL = -5.0
ZERO3 = (0, 0, 0)
# name: (axis contiguity, input halo, output halo, input padding, output padding)
LAYOUTS = {
    "plain": ((False, False, False), ZERO3, ZERO3, ZERO3, ZERO3),
    "halos and padding": ((False, False, False), (1, 0, 1), (0, 2, 0), (0, 1, 0), (1, 0, 0)),
    "axis-contiguous": ((True, True, True), ZERO3, (1, 1, 0), (0, 0, 1), ZERO3),
}


def batch(info: cudecomp.PencilInfo, dtype: DataType, k: int) -> np.ndarray:
    """``k`` distinct fields of the pencil: the oracle plus a per-field offset inside."""
    one = make(info, GDIMS, dtype, SENTINEL)
    inside = interior(info)
    b = np.stack([one] * k)
    for f in range(k):
        b[f][inside] += 1000.0 * f
    return b


def grid_of(
    handle: cudecomp.Handle, pdims: tuple[int, int], backend: cudecomp.TransposeCommBackend, contiguous: tuple[bool, bool, bool]
) -> cudecomp.GridDesc:
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = GDIMS, pdims
    cfg.transpose_comm_backend = backend
    cfg.transpose_axis_contiguous = contiguous
    return handle.create_grid(cfg)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [DataType.DOUBLE, DataType.FLOAT_COMPLEX])
@pytest.mark.parametrize("backend", variant_transpose_backends())
def test_a_batch_equals_one_transpose_per_field(
    handle: cudecomp.Handle, backend: cudecomp.TransposeCommBackend, dtype: DataType, layout: str
) -> None:
    contiguous, in_halo, out_halo, in_pad, out_pad = LAYOUTS[layout]
    kw = dict(input_halo_extents=in_halo, output_halo_extents=out_halo, input_padding=in_pad, output_padding=out_pad)
    for pdims in factor_pairs(NRANKS):
        grid = grid_of(handle, pdims, backend, contiguous)
        for name, a, b in OPS:
            src = grid.get_pencil_info(a, in_halo, in_pad)
            dst = grid.get_pencil_info(b, out_halo, out_pad)
            x = batch(src, dtype, K)
            out = device(np.full((K, *dst.array_shape), SENTINEL, dtype=x.dtype))
            got = getattr(grid, name)(device(x), out=out, **kw)
            assert got is out
            for f in range(K):
                one = device(np.full(dst.array_shape, SENTINEL, dtype=x.dtype))
                getattr(grid, name)(device(np.ascontiguousarray(x[f])), out=one, **kw)
                assert np.array_equal(to_host(out)[f], to_host(one)), f"{name} {pdims} field {f}"
        grid.destroy()


@pytest.mark.parametrize("backend", variant_transpose_backends())
def test_a_batch_cut_into_slices_equals_one_transpose_per_field(backend: cudecomp.TransposeCommBackend) -> None:
    # Slices of 64 bytes cut every chunk: each field then travels in its own slices.
    with handle_with(CUDECOMP_PIPELINE_SLICE_BYTES="64") as h:
        for pdims in factor_pairs(NRANKS):
            grid = grid_of(h, pdims, backend, (False, False, False))
            for name, a, b in OPS:
                src, dst = grid.get_pencil_info(a), grid.get_pencil_info(b)
                x = batch(src, DataType.DOUBLE, K)
                got = to_host(getattr(grid, name)(device(x)))
                inside = interior(dst)
                for f in range(K):
                    one = to_host(getattr(grid, name)(device(np.ascontiguousarray(x[f]))))
                    assert np.array_equal(got[f][inside], one[inside]), f"{name} {pdims} field {f}"
            grid.destroy()


def test_a_batch_allocates_its_output_and_one_field_batch_keeps_its_axis(handle: cudecomp.Handle) -> None:
    grid = grid_of(handle, (1, NRANKS), cudecomp.TransposeCommBackend.MPI_P2P, (False, False, False))
    src, dst = grid.get_pencil_info(0), grid.get_pencil_info(1)
    x = batch(src, DataType.DOUBLE, K)
    y = to_host(grid.transpose_x_to_y(device(x)))
    assert y.shape == (K, *dst.array_shape)
    inside = interior(dst)
    for f in range(K):
        assert np.array_equal(y[f][inside], make(dst, GDIMS, DataType.DOUBLE)[inside] + 1000.0 * f)
    assert to_host(grid.transpose_x_to_y(device(x[:1]))).shape == (1, *dst.array_shape)
    grid.destroy()


def test_an_in_place_batch_needs_pencils_of_one_size(handle: cudecomp.Handle) -> None:
    grid = grid_of(handle, (1, NRANKS), cudecomp.TransposeCommBackend.MPI_P2P, (False, False, False))
    # X and Y pencils of (1, n) grids hold the same cells on every rank.
    src, dst = grid.get_pencil_info(0), grid.get_pencil_info(1)
    assert src.size == dst.size
    x = batch(src, DataType.DOUBLE, K)
    y = grid.transpose_x_to_y(device(x), out=device(x.copy()))
    inplace = device(x.copy())
    assert grid.transpose_x_to_y(inplace, out=inplace) is inplace
    assert np.array_equal(to_host(inplace), to_host(y))
    # Padding the output makes it larger on every rank.
    with pytest.raises(cudecomp.InvalidUsageError, match="pencils of one size"):
        grid.transpose_x_to_y(inplace, out=inplace, output_padding=(1, 0, 0))
    grid.destroy()
    if NRANKS > 1:
        # (n, 1): X- and Y-pencils differ in size on some ranks; the rule is the whole
        # exchange's, so every rank raises (none waits in the exchange).
        grid = grid_of(handle, (NRANKS, 1), cudecomp.TransposeCommBackend.MPI_P2P, (False, False, False))
        src, dst = grid.get_pencil_info(0), grid.get_pencil_info(1)
        room = device(np.zeros((K, max(src.size, dst.size))))
        x = room.reshape(-1)[: K * src.size].reshape(K, *src.array_shape)
        y = room.reshape(-1)[: K * dst.size].reshape(K, *dst.array_shape)
        with pytest.raises(cudecomp.InvalidUsageError, match="on rank"):
            grid.transpose_x_to_y(x, out=y)
        grid.destroy()


def test_what_a_batch_may_not_be_raises(handle: cudecomp.Handle) -> None:
    grid = grid_of(handle, (1, NRANKS), cudecomp.TransposeCommBackend.MPI_P2P, (False, False, False))
    src, dst = grid.get_pencil_info(0), grid.get_pencil_info(1)
    x = device(batch(src, DataType.DOUBLE, K))
    fields = [device(make(src, GDIMS, DataType.DOUBLE)) for _ in range(K)]
    with pytest.raises(TypeError, match="leading batch axis"):
        grid.transpose_x_to_y(fields)
    with pytest.raises(cudecomp.InvalidUsageError, match=r"out: expected shape \(3, "):
        grid.transpose_x_to_y(x, out=device(np.zeros((2, *dst.array_shape))))
    with pytest.raises(cudecomp.InvalidUsageError, match="out: expected shape"):
        grid.transpose_x_to_y(x, out=device(np.zeros(dst.array_shape)))
    with pytest.raises(cudecomp.InvalidUsageError, match="at least one field"):
        grid.transpose_x_to_y(device(np.zeros((0, *src.array_shape))))
    with pytest.raises(cudecomp.InvalidUsageError, match="3-dimensional array .* or a 4-dimensional"):
        grid.transpose_x_to_y(device(np.zeros((1, 1, *src.array_shape))))
    # An explicit workspace holds the grid's workspace once per field.
    one = grid.get_transpose_workspace_size()
    with pytest.raises(cudecomp.InvalidUsageError, match="times 3 fields"):
        grid.transpose_x_to_y(x, work=device(np.zeros(one)))
    y = grid.transpose_x_to_y(x, work=device(np.zeros(K * one)))
    assert y.shape == (K, *dst.array_shape)
    grid.destroy()


@pytest.mark.checking
@pytest.mark.mpi(min_ranks=2)
def test_batches_of_different_sizes_on_different_ranks_raise_on_every_rank(handle: cudecomp.Handle) -> None:
    grid = grid_of(handle, (1, NRANKS), cudecomp.TransposeCommBackend.MPI_P2P, (False, False, False))
    src = grid.get_pencil_info(0)
    k = 2 if MPI.COMM_WORLD.rank == 0 else K
    with pytest.raises(cudecomp.InvalidUsageError, match="fields"):
        grid.transpose_x_to_y(device(batch(src, DataType.DOUBLE, k)))
    # The grid goes on working.
    y = grid.transpose_x_to_y(device(batch(src, DataType.DOUBLE, K)))
    assert xp.asarray(y).shape[0] == K
    grid.destroy()


UPDATES = ("update_halos_x", "update_halos_y", "update_halos_z")


@pytest.mark.parametrize("periods", [(True, True, True), (False, True, False)])
@pytest.mark.parametrize("backend", variant_halo_backends())
def test_a_batch_of_halo_updates_equals_one_update_per_field(
    handle: cudecomp.Handle, backend: cudecomp.HaloCommBackend, periods: tuple[bool, bool, bool]
) -> None:
    halo, padding = (1, 1, 1), (0, 1, 0)
    for pdims in factor_pairs(NRANKS):
        cfg = cudecomp.GridDescConfig()
        cfg.gdims, cfg.pdims, cfg.halo_comm_backend = GDIMS, pdims, backend
        grid = handle.create_grid(cfg)
        for axis, name in enumerate(UPDATES):
            info = grid.get_pencil_info(axis, halo, padding)
            fields = batch(info, DataType.DOUBLE, K)
            for dim in range(3):
                # Copies: on the CPU, device() and a field of a C-contiguous batch are views.
                got = device(fields.copy())
                getattr(grid, name)(got, halo, periods, dim, padding=padding)
                for f in range(K):
                    one = device(fields[f].copy())
                    getattr(grid, name)(one, halo, periods, dim, padding=padding)
                    assert np.array_equal(to_host(got)[f], to_host(one)), f"{name} dim {dim} {pdims} field {f}"
                # The next dimension starts from what this one wrote, in both.
                fields = to_host(got)
        grid.destroy()


def test_a_halo_batch_needs_its_workspace_once_per_field(handle: cudecomp.Handle) -> None:
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = GDIMS, (1, NRANKS)
    grid = handle.create_grid(cfg)
    halo = (1, 1, 1)
    info = grid.get_pencil_info(0, halo)
    data = device(batch(info, DataType.DOUBLE, K))
    one = grid.get_halo_workspace_size(0, halo)
    with pytest.raises(cudecomp.InvalidUsageError, match="times 3 fields"):
        grid.update_halos_x(data, halo, None, 2, work=device(np.zeros(max(one, 1))))
    grid.update_halos_x(data, halo, None, 2, work=device(np.zeros(K * one)))
    with pytest.raises(TypeError, match="leading batch axis"):
        grid.update_halos_x([data[0], data[1]], halo, None, 2)
    with pytest.raises(cudecomp.InvalidUsageError, match="at least one field"):
        grid.update_halos_x(device(np.zeros((0, *info.array_shape))), halo, None, 2)
    grid.destroy()


@pytest.mark.parametrize("backend", variant_transpose_backends())
def test_a_batch_redistributed_equals_one_run_per_field(handle: cudecomp.Handle, backend: cudecomp.TransposeCommBackend) -> None:
    halo_in, pad_out = (1, 0, 1), (0, 1, 0)
    for pdims in factor_pairs(NRANKS):
        grid = grid_of(handle, pdims, backend, (False, False, False))
        src, dst = grid.pencil(0, halo_in), grid.pencil(2, (0, 0, 0), pad_out)
        with handle.create_redistribution(src, dst, backend=backend) as r:
            x = batch(r.input_info, DataType.DOUBLE, K)
            got = to_host(r.run(device(x), device(np.full((K, *r.output_info.array_shape), SENTINEL))))
            for f in range(K):
                one = to_host(r.run(device(x[f].copy()), device(np.full(r.output_info.array_shape, SENTINEL))))
                assert np.array_equal(got[f], one), f"{pdims} field {f}"
            assert to_host(r.run(device(x))).shape == (K, *r.output_info.array_shape)
            with pytest.raises(cudecomp.InvalidUsageError, match="times 3 fields"):
                r.run(device(x), work=device(np.zeros(max(r.get_workspace_size(), 1))))
        grid.destroy()


def test_a_batch_gathered_to_one_rank_and_scattered_back_is_what_it_was(handle: cudecomp.Handle) -> None:
    root = NRANKS - 1
    whole = cudecomp.BoxLayout.whole(GDIMS) if MPI.COMM_WORLD.rank == root else cudecomp.BoxLayout.empty()
    grid = grid_of(handle, factor_pairs(NRANKS)[-1], cudecomp.TransposeCommBackend.MPI_P2P, (False, False, False))
    y = grid.pencil(1)
    with handle.create_redistribution(y, whole) as gather, handle.create_redistribution(whole, y) as scatter:
        local = batch(grid.get_pencil_info(1), DataType.DOUBLE, K)
        full = gather.run(device(local))
        assert tuple(full.shape) == (K, *gather.output_info.array_shape)
        assert np.array_equal(to_host(scatter.run(full)), local)
    grid.destroy()


def test_the_performance_report_counts_a_batch_as_its_fields(tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    comm = MPI.COMM_WORLD
    out = comm.bcast(str(tmp_path) if comm.rank == 0 else None)
    report = {
        "ENABLE_PERFORMANCE_REPORT": "1",
        "PERFORMANCE_REPORT_DETAIL": "1",
        "PERFORMANCE_REPORT_WARMUP_SAMPLES": "0",
        "PERFORMANCE_REPORT_WRITE_DIR": out,
    }
    for k, v in report.items():
        monkeypatch.setenv(f"CUDECOMP_{k}", v)
    with cudecomp.Handle(comm) as h:
        grid = grid_of(h, factor_pairs(NRANKS)[-1], cudecomp.TransposeCommBackend.MPI_P2P, (False, False, False))
        x = device(batch(grid.get_pencil_info(0), DataType.DOUBLE, K))
        for _ in range(3):
            grid.transpose_x_to_y(x)
            grid.transpose_x_to_y(device(to_host(x)[0].copy()))
        grid.destroy()
    if comm.rank == 0:
        (agg,) = glob.glob(os.path.join(out, "cudecomp-perf-report-transpose-aggregated-*.csv"))
        lines = [ln.strip().split(",") for ln in open(agg) if not ln.startswith("#")]
        assert lines[0][8] == "fields"
        assert sorted(int(row[8]) for row in lines[1:] if row[0] == "TransposeXY") == [1, K]
    comm.Barrier()


# -- distributed FFTs -------------------------------------------------------------------

FFT_CASES = {
    "c2c": {"kind": "c2c"},
    "r2c": {"kind": "r2c"},
    "r2c transposed": {"kind": "r2c", "transposed_out": True},
    "dct2 x, dst1 z": {"transforms": ("dct2", "fft", "dst1")},
    "r2r only": {"transforms": ("dct1", "dst2", "dct3"), "transposed_out": True},
}


def fft_libraries() -> list[str]:
    return ["rustfft", "numpy", "scipy"] if cudecomp.CPU_ONLY else ["cupy"]


def fields_of(plan: cudecomp.fft.FFT, k: int, seed: int) -> np.ndarray:
    """``k`` distinct real-space fields of the plan's input pencil, as a batch."""
    from oracle import local_part, random_field

    return np.stack([local_part(random_field(plan.gdims, plan.input_dtype, seed + f), plan.input_info) for f in range(k)])


@pytest.mark.parametrize("library", fft_libraries())
@pytest.mark.parametrize("case", list(FFT_CASES))
def test_a_batch_of_ffts_equals_one_transform_per_field(handle: cudecomp.Handle, case: str, library: str) -> None:
    from cudecomp.fft import FFT
    from oracle import usable

    kw = FFT_CASES[case]
    if "transforms" in kw and library == "numpy":
        pytest.skip("numpy.fft has no cosine or sine transforms")
    for pdims in factor_pairs(NRANKS):
        if not usable(GDIMS, "r2c" if kw.get("kind") == "r2c" else "c2c", pdims):
            continue
        with FFT(handle, GDIMS, pdims, fft_library=library, norm="ortho", **kw) as plan:
            x = fields_of(plan, K, 11)
            spec = plan.forward(device(x))
            assert tuple(spec.shape) == (K, *plan.output_info.array_shape) and spec.dtype == plan.output_dtype
            out = plan.empty_output(fields=K)
            assert plan.forward(device(x), out) is out
            back = plan.backward(spec)
            assert tuple(back.shape) == (K, *plan.input_info.array_shape)
            for f in range(K):
                one = to_host(plan.forward(device(x[f].copy())))
                assert np.array_equal(to_host(spec)[f], one), (pdims, f)
                assert np.array_equal(to_host(out)[f], one), (pdims, f)
                assert np.array_equal(to_host(back)[f], to_host(plan.backward(device(one)))), (pdims, f)
            # The plan still runs one pencil after a batch, and a batch of another size.
            assert tuple(plan.forward(device(x[0].copy())).shape) == plan.output_info.array_shape
            assert plan.backward(plan.forward(device(x[:2].copy()))).shape[0] == 2


def test_what_an_fft_batch_may_not_be_raises(handle: cudecomp.Handle) -> None:
    from cudecomp.fft import FFT

    with FFT(handle, GDIMS, (1, NRANKS), kind="r2c") as plan:
        x = device(fields_of(plan, K, 3))
        with pytest.raises(TypeError, match=r"\(k, \*array_shape\)"):
            plan.forward([x[0], x[1]])
        with pytest.raises(cudecomp.InvalidUsageError, match="batch of 3 fields"):
            plan.forward(x, plan.empty_output(fields=2))
        with pytest.raises(cudecomp.InvalidUsageError, match="batch of 3 fields"):
            plan.forward(x, plan.empty_output())
        with pytest.raises(cudecomp.InvalidUsageError, match="one pencil"):
            plan.forward(x[0].copy(), plan.empty_output(fields=1))
        with pytest.raises(cudecomp.InvalidUsageError, match="at least 1 field"):
            plan.forward(x[:0])
        with pytest.raises(cudecomp.InvalidUsageError, match="a batch of k fields"):
            plan.forward(x[None])
        with pytest.raises(TypeError, match="dtype"):
            plan.forward(x.astype(np.float32))  # one dtype for the whole batch: the plan's
        assert plan.backward(plan.forward(x)).shape == x.shape  # the plan still works


@pytest.mark.checking
@pytest.mark.mpi(min_ranks=2)
def test_fft_batches_of_different_sizes_on_different_ranks_raise_on_every_rank(handle: cudecomp.Handle) -> None:
    from cudecomp.fft import FFT

    with FFT(handle, GDIMS, (1, NRANKS)) as plan:
        k = 2 if MPI.COMM_WORLD.rank == 0 else K
        x = np.stack([np.ones(plan.input_info.array_shape, plan.input_dtype)] * k)
        with pytest.raises(cudecomp.InvalidUsageError, match="fields"):
            plan.forward(device(x))
        assert plan.forward(device(x[:2].copy())).shape[0] == 2  # the plan goes on working
