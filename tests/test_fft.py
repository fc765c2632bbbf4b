"""cudecomp.fft against numpy.fft on the gathered global arrays.

Every test runs on every rank (any rank count) over every process grid of the rank
count; arrays are NumPy in the CPU variant and CuPy in the GPU variant (the GPU tests skip
without a GPU, like the other data-path suites).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import gpu_available, handle_with, requires_data_path
from cudecomp.fft import FFT, schedule_of
from oracle import TOL32, TOL64, check_plan, device, factor_pairs, gather, local_part, make_plan, random_field, rel, to_host, usable, xp

pytestmark = [pytest.mark.mpi, requires_data_path()]

COMM = MPI.COMM_WORLD
PDIMS = factor_pairs(COMM.size)
SIZES = [(7, 9, 11), (5, 6, 7), (8, 8, 8)]
NORMS = ["backward", "ortho", "forward"]


@pytest.mark.parametrize("pdims", PDIMS, ids=lambda p: f"{p[0]}x{p[1]}")
@pytest.mark.parametrize("transposed", [False, True], ids=["natural", "transposed"])
@pytest.mark.parametrize("kind", ["c2c", "r2c"])
@pytest.mark.parametrize("gdims", SIZES, ids=lambda g: "x".join(map(str, g)))
def test_matches_numpy_float64(
    handle: cudecomp.Handle, gdims: tuple[int, int, int], kind: str, transposed: bool, pdims: tuple[int, int]
) -> None:
    plan = make_plan(handle, gdims, pdims, kind=kind, transposed_out=transposed)
    if plan is None:
        return
    with plan:
        assert plan.schedule == schedule_of(pdims) and plan.pdims == pdims
        assert plan.output_axis == (2 if transposed else 0)
        check_plan(plan, TOL64, reuse=True)


@pytest.mark.parametrize("pdims", PDIMS, ids=lambda p: f"{p[0]}x{p[1]}")
@pytest.mark.parametrize("transposed", [False, True], ids=["natural", "transposed"])
@pytest.mark.parametrize("kind", ["c2c", "r2c"])
@pytest.mark.parametrize("norm", ["ortho", "forward"])
def test_norms(handle: cudecomp.Handle, norm: str, kind: str, transposed: bool, pdims: tuple[int, int]) -> None:
    plan = make_plan(handle, (7, 9, 11), pdims, kind=kind, norm=norm, transposed_out=transposed)
    if plan is not None:
        with plan:
            check_plan(plan, TOL64, seed=3)


@pytest.mark.parametrize("pdims", PDIMS, ids=lambda p: f"{p[0]}x{p[1]}")
@pytest.mark.parametrize("transposed", [False, True], ids=["natural", "transposed"])
@pytest.mark.parametrize("kind", ["c2c", "r2c"])
def test_single_precision(handle: cudecomp.Handle, kind: str, transposed: bool, pdims: tuple[int, int]) -> None:
    dtype = np.complex64 if kind == "c2c" else np.float32
    plan = make_plan(handle, (9, 6, 7), pdims, kind=kind, dtype=dtype, transposed_out=transposed, norm="ortho")
    if plan is not None:
        with plan:
            assert plan.output_dtype == np.complex64
            check_plan(plan, TOL32, seed=5)


@pytest.mark.parametrize("kind", ["c2c", "r2c"])
def test_out_arrays_and_allocation(handle: cudecomp.Handle, kind: str) -> None:
    with FFT(handle, (6, 5, 8), kind=kind, pdims=PDIMS[len(PDIMS) // 2]) as plan:
        a = plan.zeros_input()
        assert tuple(a.shape) == plan.input_info.array_shape and a.dtype == plan.input_dtype
        assert float(abs(a).max()) == 0
        a[...] = device(local_part(random_field(plan.gdims, plan.input_dtype, 7), plan.input_info))
        out = plan.empty_output()
        assert tuple(out.shape) == plan.output_info.array_shape and out.dtype == plan.output_dtype
        assert plan.forward(a, out) is out
        back = plan.empty_input()
        assert plan.backward(out, back) is back
        assert rel(to_host(back), to_host(a)) < 1e-13
        assert tuple(plan.zeros_output().shape) == plan.output_info.array_shape


def test_wavenumbers_and_coordinates(handle: cudecomp.Handle) -> None:
    gdims = (6, 5, 4)
    for kind, transposed in [("c2c", False), ("r2c", True), ("r2c", False)]:
        with FFT(handle, gdims, PDIMS[len(PDIMS) // 2], kind=kind, transposed_out=transposed) as plan:
            info = plan.output_info
            shape = plan.spectral_gdims[::-1]
            lengths = (2.0, 3.0, 4.0)
            mods, waves = plan.modes(), plan.wavenumbers(lengths)
            for g in range(3):
                n = gdims[g]
                full = np.fft.rfftfreq(n, 1 / n) if (kind == "r2c" and g == 0) else np.fft.fftfreq(n, 1 / n)
                glob = np.broadcast_to(full.reshape([-1 if a == 2 - g else 1 for a in range(3)]), shape)
                expect = local_part(glob, info)
                assert to_host(mods[g]).dtype == np.int64
                assert np.array_equal(np.broadcast_to(to_host(mods[g]), info.array_shape), expect)
                assert np.allclose(np.broadcast_to(to_host(waves[g]), info.array_shape), 2 * np.pi * expect / lengths[g], rtol=1e-15)
            x, y, z = plan.coordinates(lengths)
            for g, c in enumerate((x, y, z)):
                full = np.arange(gdims[g]) * lengths[g] / gdims[g]
                glob = np.broadcast_to(full.reshape([-1 if a == 2 - g else 1 for a in range(3)]), gdims[::-1])
                assert np.allclose(np.broadcast_to(to_host(c), plan.input_info.array_shape), local_part(glob, plan.input_info))


@pytest.mark.parametrize("pdims", PDIMS, ids=lambda p: f"{p[0]}x{p[1]}")
def test_spectral_derivative(handle: cudecomp.Handle, pdims: tuple[int, int]) -> None:
    plan = make_plan(handle, (16, 12, 10), pdims, kind="r2c", transposed_out=True)
    if plan is None:
        return
    with plan:
        x, y, z = plan.coordinates()
        u = xp.sin(2 * x) * xp.cos(y) * xp.cos(3 * z)
        kx, ky, kz = plan.wavenumbers()
        du = plan.backward(1j * kz * plan.forward(xp.ascontiguousarray(u)))
        expect = -3 * xp.sin(2 * x) * xp.cos(y) * xp.sin(3 * z)
        assert rel(to_host(du), to_host(expect)) < 1e-13


def test_autotune_picks_a_measured_grid(handle: cudecomp.Handle) -> None:
    gdims = (8, 6, 6)
    usable_grids = [p for p in PDIMS if usable(gdims, "r2c", p)]
    with FFT(handle, gdims, None, kind="r2c", autotune_reps=1) as plan:
        assert plan.pdims in usable_grids
        if len(usable_grids) > 1:
            assert {p for p, _ in plan.autotune_times} == set(usable_grids)
            best = min(plan.autotune_times, key=lambda k: plan.autotune_times[k])
            assert best[0] == plan.pdims
        check_plan(plan, TOL64)
    backends = [cudecomp.TransposeCommBackend.MPI_P2P, cudecomp.TransposeCommBackend.MPI_A2A]
    with FFT(handle, gdims, (0, 0), backend=backends, autotune_reps=1) as plan:
        assert {b for _, b in plan.autotune_times} == {"MPI_P2P", "MPI_A2A"}
        assert plan.grid.config.transpose_comm_backend in backends


def test_base_config_backend_and_rank_order(handle: cudecomp.Handle) -> None:
    cfg = cudecomp.GridDescConfig()
    cfg.transpose_comm_backend = cudecomp.TransposeCommBackend.MPI_A2A
    cfg.rank_order = cudecomp.RankOrder.COL_MAJOR
    cfg.gdims_dist = (3, 3, 3)  # replaced by the plan
    pdims = PDIMS[len(PDIMS) // 2]
    with FFT(handle, (7, 8, 9), pdims, kind="r2c", config=cfg) as plan:
        for g in (plan.grid, plan.spectral_grid):
            assert g.config.transpose_comm_backend == cudecomp.TransposeCommBackend.MPI_A2A
            assert g.config.rank_order == cudecomp.RankOrder.COL_MAJOR
        check_plan(plan, TOL64, seed=17)
    assert cfg.pdims.tolist() == [0, 0]  # the caller's config is not modified


def test_properties_and_lifetime(handle: cudecomp.Handle) -> None:
    plan = FFT(handle, (9, 8, 7), PDIMS[0], kind="r2c", dtype=np.float32, norm="ortho")
    assert plan.kind == "r2c" and plan.norm == "ortho" and not plan.transposed_out
    assert plan.gdims == (9, 8, 7) and plan.spectral_gdims == (5, 8, 7)
    assert plan.input_dtype == np.float32 and plan.output_dtype == np.complex64
    assert plan.spectral_grid is not plan.grid and plan.spectral_grid.config.pdims.tolist() == list(PDIMS[0])
    assert plan.input_info.order == (0, 1, 2)
    assert "r2c" in repr(plan)
    plan.destroy()
    with pytest.raises(cudecomp.InvalidUsageError):
        plan.forward(np.zeros(1))
    with pytest.raises(cudecomp.InvalidUsageError):
        plan.destroy()
    assert "destroyed" in repr(plan)
    with FFT(handle, (6, 6, 6), PDIMS[0], dtype=cudecomp.DataType.FLOAT_COMPLEX) as c2c:
        assert c2c.spectral_grid is c2c.grid and c2c.input_dtype == np.complex64


def test_misuse(handle: cudecomp.Handle) -> None:
    gdims = (6, 6, 6)
    with pytest.raises(ValueError, match="norm"):
        FFT(handle, gdims, PDIMS[0], norm="none")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        FFT(handle, gdims, PDIMS[0], kind="c2r")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        FFT(handle, gdims, PDIMS[0], kind="r2c", dtype=np.complex128)
    with pytest.raises(TypeError):
        FFT(handle, gdims, PDIMS[0], kind="c2c", dtype=np.float64)
    with pytest.raises(TypeError):
        FFT(handle, gdims, PDIMS[0], dtype="int32")
    with pytest.raises(TypeError, match="native byte order"):
        FFT(handle, gdims, PDIMS[0], dtype=">c16")
    with FFT(handle, gdims, PDIMS[0], kind="r2c", dtype=cudecomp.DataType.FLOAT) as plan:
        assert plan.input_dtype == np.float32 and plan.output_dtype == np.complex64
    with pytest.raises(cudecomp.InvalidUsageError):
        FFT(handle, gdims, (COMM.size, 2))
    with pytest.raises(cudecomp.InvalidUsageError):
        FFT(handle, (6, 0, 6), PDIMS[0])
    with pytest.raises(ValueError, match="fft_library"):
        FFT(handle, gdims, PDIMS[0], fft_library="fftw")
    with pytest.raises(TypeError, match="config"):
        FFT(handle, gdims, PDIMS[0], config={"pdims": (1, 1)})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="backend"):
        FFT(handle, gdims, PDIMS[0], backend=["MPI_P2P"])  # type: ignore[list-item]
    with FFT(handle, gdims, PDIMS[0], kind="r2c") as plan:
        good = plan.zeros_input()
        with pytest.raises(TypeError, match="dtype"):
            plan.forward(good.astype(np.complex128))  # complex input to r2c
        with pytest.raises(TypeError, match="dtype"):
            plan.forward(good.astype(np.float32))
        with pytest.raises(TypeError):
            plan.forward(to_host(good).tolist())
        with pytest.raises(cudecomp.InvalidUsageError, match="shape"):
            plan.forward(xp.zeros((1, 2, 3)))
        with pytest.raises(cudecomp.InvalidUsageError, match="contiguous"):
            plan.forward(xp.zeros(good.shape[::-1]).T)
        spec = plan.forward(good)
        with pytest.raises(TypeError, match="dtype"):
            plan.backward(spec.real.copy())
        with pytest.raises(cudecomp.InvalidUsageError, match="shape"):
            plan.forward(good, out=plan.zeros_input().astype(np.complex128))
        with pytest.raises(TypeError, match="dtype"):
            plan.backward(spec, out=plan.zeros_input().astype(np.float32))
        with pytest.raises(ValueError, match="lengths"):
            plan.wavenumbers((1.0, 2.0))
    if COMM.size > 1:
        with pytest.raises(cudecomp.NotSupportedError):
            FFT(handle, (1, 1, 1), (1, COMM.size))


@pytest.mark.parametrize(
    "kw, error",
    [
        ({"gdims": (6.5, 6, 6)}, TypeError),
        ({"gdims": "666"}, TypeError),
        ({"gdims": (True, 6, 6)}, TypeError),
        ({"gdims": None}, TypeError),
        ({"gdims": (6, 6)}, cudecomp.InvalidUsageError),
        ({"pdims": "1x1"}, TypeError),
        ({"pdims": (1.5, 2)}, TypeError),
        ({"autotune_reps": 2.5}, TypeError),
        ({"autotune_reps": -5}, cudecomp.InvalidUsageError),
        ({"workers": "4"}, TypeError),
        ({"workers": 0}, cudecomp.InvalidUsageError),
        ({"gdims": (6, (6,), 6)}, TypeError),
        ({"comm": "world"}, TypeError),
        ({"backend": 1}, TypeError),
    ],
)
def test_argument_types(handle: cudecomp.Handle, kw: dict[str, Any], error: type[Exception]) -> None:
    args: dict[str, Any] = {"gdims": (6, 6, 6), "pdims": PDIMS[0], **kw}
    name = next(iter(kw))
    with pytest.raises(error, match=name):
        FFT(handle, args.pop("gdims"), args.pop("pdims"), **args)
    with FFT(handle, (6, 6, 6), PDIMS[0]) as plan:
        for bad in (float("nan"), float("inf"), (1.0, 0.0, 1.0)):
            with pytest.raises(cudecomp.InvalidUsageError, match="lengths"):
                plan.wavenumbers(bad)
        with pytest.raises(TypeError, match="lengths"):
            plan.coordinates("1")
        for bad in (True, (1.0, np.True_, 1.0)):
            with pytest.raises(TypeError, match="lengths"):
                plan.coordinates(bad)
        # NumPy scalars are numbers too.
        for good in (np.float32(2.0), np.int64(3), (np.float64(1.0), 2, np.float32(3.0))):
            assert len(plan.wavenumbers(good)) == 3


@pytest.mark.skipif(COMM.size < 2, reason="needs several ranks")
def test_arguments_agree_across_ranks(handle: cudecomp.Handle) -> None:
    last = COMM.rank == COMM.size - 1
    # Arguments that differ: every rank raises instead of waiting in an exchange.
    for kw in ({"kind": "r2c" if last else "c2c"}, {"transposed_out": last}, {"norm": "ortho" if last else "backward"}):
        (name,) = kw
        want = f"differ across ranks: .*{name} is .* on rank 0 and .* on rank {COMM.size - 1}"
        with pytest.raises(cudecomp.InvalidUsageError, match=want):
            FFT(handle, (6, 6, 6), PDIMS[0], **kw)
    # An argument that fails on one rank: it raises its own error, the others name it.
    with pytest.raises(cudecomp.InvalidUsageError, match="kind" if last else f"rank {COMM.size - 1} failed in"):
        FFT(handle, (6, 6, 6), PDIMS[0], kind="C2C" if last else "c2c")  # type: ignore[arg-type]
    # Streaming settings decide collective steps: the ranks agree on them when a handle is
    # made.
    for var, mine, theirs in (("CUDECOMP_FFT_CHUNKS", "3", "4"), ("CUDECOMP_FFT_BACKWARD", "planes", "rows")):
        with pytest.raises(cudecomp.InvalidUsageError, match=f"differ across ranks: .*{var} is"):
            with handle_with(**{var: mine if last else theirs}):
                pass
    with FFT(handle, (6, 6, 6), PDIMS[0]) as plan:
        assert plan.forward(plan.zeros_input()).shape == plan.output_info.array_shape


@pytest.mark.skipif(not cudecomp.CPU_ONLY, reason="CPU variant: the local FFT library choice")
def test_cpu_libraries_agree(handle: cudecomp.Handle) -> None:
    pytest.importorskip("scipy")
    plans = [FFT(handle, (12, 6, 6), PDIMS[-1], kind="r2c", fft_library=lib, workers=2) for lib in ("numpy", "scipy")]
    a = local_part(random_field((12, 6, 6), np.float64, 11), plans[0].input_info)
    r = [p.forward(a) for p in plans]
    assert rel(r[0], r[1]) < 1e-14
    for p in plans:
        p.destroy()
    with pytest.raises(ValueError):
        FFT(handle, (6, 6, 6), PDIMS[0], fft_library="cupy")


@pytest.mark.skipif(not gpu_available(), reason="needs the GPU variant and a GPU")
def test_gpu_stream_is_used(handle: cudecomp.Handle) -> None:  # pragma: no cover - GPU
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with FFT(handle, (32, 24, 16), PDIMS[-1], kind="r2c", transposed_out=True) as plan:
        A = random_field(plan.gdims, np.float64, 13)
        with stream:
            a = cupy.asarray(local_part(A, plan.input_info))
        stream.synchronize()
        for s in (stream, stream.ptr, cupy.cuda.Stream.null):
            spec = plan.forward(a, stream=s)
            back = plan.backward(spec, stream=s)
            (s if not isinstance(s, int) else stream).synchronize()
            assert rel(gather(spec, plan.output_info, plan.spectral_gdims[::-1]), np.fft.rfftn(A)) < 1e-12
            assert rel(to_host(back), local_part(A, plan.input_info)) < 1e-13


def test_stream_is_accepted_on_cpu(handle: cudecomp.Handle) -> None:
    if not cudecomp.CPU_ONLY:
        pytest.skip("CPU variant")
    with FFT(handle, (6, 6, 6), PDIMS[0]) as plan:
        a = plan.zeros_input()
        assert float(abs(plan.backward(plan.forward(a, stream=5), stream=None)).max()) == 0


def test_stream_forms() -> None:
    from cudecomp.fft._gpu import _stream_ptr

    class Proto:
        def __cuda_stream__(self) -> tuple[int, int]:
            return (0, 1234)

    class Ptr:
        ptr = 99

    assert _stream_ptr(7) == 7 and _stream_ptr(Proto()) == 1234 and _stream_ptr(Ptr()) == 99
    for bad in (True, "s", 1.5):
        with pytest.raises(TypeError):
            _stream_ptr(bad)


@pytest.mark.skipif(not gpu_available(), reason="needs the GPU variant and a GPU")
@pytest.mark.parametrize("norm", ["backward", "forward"])
@pytest.mark.parametrize("kind", ["c2c", "r2c"])
def test_out_without_cupy_plan_lookup(handle: cudecomp.Handle, kind: str, norm: str) -> None:
    """Where CuPy lacks its cached-plan lookup, the stages into ``out=`` transform into a new array and copy: same results."""
    for pdims in (PDIMS[0], PDIMS[-1]):
        plan = make_plan(handle, (12, 10, 8), pdims, kind=kind, norm=norm)
        if plan is None:
            continue
        with plan:
            plan._local.plan_nd = None  # type: ignore[attr-defined]
            check_plan(plan, TOL64, seed=5, reuse=True)


@pytest.mark.skipif(cudecomp.CPU_ONLY or COMM.size < 2 or not gpu_available(), reason="GPU slab-xy plans on DIRECT, with peers")
@pytest.mark.parametrize("shared", [False, True], ids=["private", "exported"])
@pytest.mark.parametrize("chunks", ["1", "3", "64"])
@pytest.mark.parametrize("transposed", [False, True], ids=["natural", "transposed"])
@pytest.mark.parametrize("kind", ["c2c", "r2c"])
@pytest.mark.parametrize("norm", ["backward", "ortho"])  # ortho: both directions scale
@pytest.mark.parametrize("nz", [10, 40])  # 40 = 8 x 5: the FFT along Z on cudecomp.fft._zfft (10: cuFFT)
@pytest.mark.parametrize("order", ["rows", "planes"])  # the backward's (CUDECOMP_FFT_BACKWARD)
def test_streamed_slabs(
    kind: str,
    transposed: bool,
    chunks: str,
    shared: bool,
    norm: str,
    nz: int,
    order: str,
) -> None:
    """GPU slab-xy on DIRECT: 2-D FFTs streamed slab by slab into the exchange (X-fastest Z-pencils)."""
    from cudecomp import _cudecomp as ext

    settings = {
        "CUDECOMP_FFT_CHUNKS": chunks,
        "CUDECOMP_FFT_BACKWARD": order,
        "CUDECOMP_FFT_STREAM": "1",  # also where the ranks share a GPU
        "CUDECOMP_SINGLE_COPY": None,
        # The plan's small buffers exported too: the copy engine's single copies run.
        "CUDECOMP_SHARED_ARRAY_MIN_BYTES": "0" if shared else None,
    }
    with handle_with(**settings) as h:
        streamed_slab_case(h, kind, transposed, shared, norm, nz, ext)


def streamed_slab_case(handle: cudecomp.Handle, kind: str, transposed: bool, shared: bool, norm: str, nz: int, ext: Any) -> None:
    """One case of :func:`test_streamed_slabs` on ``handle``."""
    gdims = (128, 24, nz)  # chunks of whole (Y, X) rows of >= 4 KiB on up to 6 ranks (r2c: 65 columns)
    plan = make_plan(
        handle, gdims, (1, COMM.size), kind=kind, norm=norm, transposed_out=transposed, backend=cudecomp.TransposeCommBackend.DIRECT
    )
    if plan is None:
        return
    with plan:
        assert plan.schedule == "slab-xy"
        assert plan.output_info.order == (0, 1, 2)
        before = ext._single_copy_count()
        check_plan(plan, TOL64, seed=11, reuse=True)
        assert (ext._single_copy_count() > before) == shared


@pytest.mark.skipif(not gpu_available(), reason="needs the GPU variant and a GPU")
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_strided_fft_kernel(dtype: type) -> None:  # pragma: no cover - GPU
    """The Z FFT kernel equals cupy.fft.fft along axis 0: lengths it takes (powers of two, mixed radix), both
    directions, scaled, in place and out of place, on slabs of rows (column counts that
    are not a multiple of a block's), with rows read from or written to another array;
    it declines what it cannot do."""
    import cupy

    from cudecomp.fft._zfft import StridedFFT, supported

    k = StridedFFT()
    tol = 1e-13 if dtype == np.complex128 else 2e-6
    rng = np.random.default_rng(3)
    for n in [*(1 << b for b in range(4, 11)), 24, 48, 96, 125, 243, 384, 720, 768, 960]:
        x = cupy.asarray((rng.standard_normal((n, 3, 7)) + 1j * rng.standard_normal((n, 3, 7))).astype(dtype))
        for inverse in (False, True):
            want = cupy.fft.ifft(x, axis=0) * n if inverse else cupy.fft.fft(x, axis=0)
            got = cupy.empty_like(x)
            assert k.takes(x, got)
            k(x, got, inverse, 0.25)
            assert float(cupy.abs(got - 0.25 * want).max()) <= tol * float(cupy.abs(want).max())
            y = x.copy()
            k(y[:, 1:3], y[:, 1:3], inverse)  # in place, rows 1-2 of each plane: 14 columns
            assert float(cupy.abs(y[:, 1:3] - want[:, 1:3]).max()) <= tol * float(cupy.abs(want).max())
            assert bool((y[:, 0] == x[:, 0]).all())
            # Rows lo..hi read from, or written to, another array (another row stride).
            lo, hi = n // 4, n // 2
            alt = cupy.zeros((hi - lo, 5, 3, 7), dtype)[:, 2]
            alt[...] = x[lo:hi]
            poisoned = x.copy()
            poisoned[lo:hi] = np.nan
            assert k.takes(poisoned, got, alt)
            k(poisoned, got, inverse, 1.0, a_rows=(lo, alt))
            assert float(cupy.abs(got - want).max()) <= tol * float(cupy.abs(want).max())
            got[...] = 7
            k(x, got, inverse, 1.0, out_rows=(lo, alt))
            assert float(cupy.abs(alt - want[lo:hi]).max()) <= tol * float(cupy.abs(want).max())
            assert bool((got[lo:hi] == 7).all())
            rest = cupy.concatenate([got[:lo] - want[:lo], got[hi:] - want[hi:]])
            assert float(cupy.abs(rest).max()) <= tol * float(cupy.abs(want).max())
    assert not any(supported(n, dtype) for n in (12, 2048, 1000, 112)) and not supported(16, np.float64)
    x = cupy.zeros((16, 4, 6), dtype)
    assert not k.takes(x[:, :, :3], x[:, :, :3])  # rows not contiguous
    assert not k.takes(x, cupy.zeros((16, 4, 6), np.complex128 if dtype == np.complex64 else np.complex64))
    # A GPU with less shared memory per block: narrower blocks, or cuFFT where none fits.
    small = StridedFFT()
    small._smem_limit = 48 * 1024
    x = cupy.asarray((rng.standard_normal((1024, 2, 5)) + 1j * rng.standard_normal((1024, 2, 5))).astype(dtype))
    got = cupy.empty_like(x)
    assert small.takes(x, got)
    small(x, got, False)
    want = cupy.fft.fft(x, axis=0)
    assert float(cupy.abs(got - want).max()) <= tol * float(cupy.abs(want).max())
    small._smem_limit = 1024
    assert not small.takes(x, got)


@pytest.mark.skipif(cudecomp.CPU_ONLY or COMM.size < 2 or not gpu_available(), reason="GPU slab-xy plans on DIRECT, with peers")
@pytest.mark.parametrize("setting", ["", "0"])
def test_streaming_follows_the_gpus(setting: str) -> None:
    """By default slabs stream only where each rank has a GPU of its own; ``0`` never."""
    with handle_with(CUDECOMP_FFT_STREAM=setting) as handle:
        streaming_case(handle, setting)


def streaming_case(handle: cudecomp.Handle, setting: str) -> None:
    """One case of :func:`test_streaming_follows_the_gpus` on ``handle``."""
    plan = make_plan(handle, (16, 8, 8), (1, COMM.size), transposed_out=True, backend=cudecomp.TransposeCommBackend.DIRECT)
    if plan is None:
        return
    with plan:
        streams = setting != "0" and handle.one_gpu_per_rank()
        assert plan.output_info.order == ((0, 1, 2) if streams else (2, 0, 1))
        check_plan(plan, TOL64, seed=13)
