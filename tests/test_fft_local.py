"""The core's local FFTs (``fft_library="rustfft"``) against numpy.fft, axis by axis.

Every kind (c2c forward and inverse, r2c, c2r), precision and norm over lengths 1, 2,
primes, 2·3·5 mixed and powers of two, along each axis of 3-D arrays (contiguous or
not), over the two fastest axes and all three, on one and on three threads, out of place
and in place; then the argument checks. No MPI communication: under mpiexec every rank
runs the same checks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudecomp
from cudecomp import _cudecomp
from cudecomp.fft._local import _make_local, _RustLocal

LENGTHS = [1, 2, 3, 5, 7, 11, 13, 17, 4, 8, 16, 64, 128, 256, 6, 12, 30, 60, 90, 120, 150]
NORMS = ["backward", "ortho", "forward"]
TOL = {np.dtype(np.complex64): 3e-5, np.dtype(np.complex128): 1e-12}


def rng_array(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    a = r.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * r.standard_normal(shape)
    return a.astype(dtype)


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300)) if b.size else 0.0


def axis_cases(n: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(shape, axes): ``n`` along each axis in turn (the others 3 and 4), and the 2-D and 3-D transforms."""
    return [
        ((3, 4, n), (2,)),
        ((3, n, 4), (1,)),
        ((n, 3, 4), (0,)),
        ((2, n, n), (1, 2)),
        ((min(n, 16), 3, n), (0, 1, 2)),
    ]


def real_cases(n: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Cases whose last transformed axis is the contiguous one (the real kinds)."""
    return [c for c in axis_cases(n) if c[1][-1] == 2]


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_c2c_matches_numpy(dtype: Any, norm: str, threads: int) -> None:
    local = _RustLocal(norm, threads)
    tol = TOL[np.dtype(dtype)]
    for n in LENGTHS:
        for shape, axes in axis_cases(n):
            a = rng_array(shape, dtype, n)
            kept = a.copy()
            for inverse in (False, True):
                ref = (np.fft.ifftn if inverse else np.fft.fftn)(a.astype(np.complex128), axes=axes, norm=norm)
                got = local.c2c(a, axes, inverse)
                assert got.dtype == a.dtype and got.shape == a.shape
                assert rel(got, ref) < tol, (n, shape, axes, inverse)
                assert np.array_equal(a, kept), "out-of-place c2c modified its input"
                b = a.copy()
                assert local.c2c(b, axes, inverse, overwrite=True) is b
                assert rel(b, ref) < tol, ("in place", n, shape, axes)
                out = np.empty_like(a)
                assert local.c2c(a, axes, inverse, out=out) is out
                assert rel(out, ref) < tol


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_r2c_and_c2r_match_numpy(dtype: Any, norm: str, threads: int) -> None:
    local = _RustLocal(norm, threads)
    cdtype = np.complex64 if dtype == np.float32 else np.complex128
    tol = TOL[np.dtype(cdtype)]
    for n in LENGTHS:
        for shape, axes in real_cases(n):
            a = rng_array(shape, dtype, n)
            kept = a.copy()
            ref = np.fft.rfftn(a.astype(np.float64), axes=axes, norm=norm)
            got = local.r2c(a, axes)
            assert got.dtype == cdtype and got.shape == ref.shape
            assert rel(got, ref) < tol, ("r2c", n, shape, axes)
            assert np.array_equal(a, kept), "r2c modified its input"
            # c2r of an arbitrary (not Hermitian) half spectrum: numpy ignores the same
            # imaginary parts.
            spec = rng_array(ref.shape, cdtype, n + 1)
            s = tuple(shape[ax] for ax in axes)
            want = np.fft.irfftn(spec.astype(np.complex128), s=s, axes=axes, norm=norm)
            skept = spec.copy()
            back = local.c2r(spec, axes, s)
            assert back.dtype == dtype and back.shape == shape
            assert rel(back, want) < tol, ("c2r", n, shape, axes)
            assert np.array_equal(spec, skept), "c2r modified its input"
            out = np.empty(shape, dtype)
            assert local.c2r(spec.copy(), axes, s, out=out, overwrite=True) is out
            assert rel(out, want) < tol, ("c2r overwriting", n, shape, axes)


def test_the_norm_is_applied_per_stage_as_numpy_does() -> None:
    """Two stages of a plan (X, then Y and Z) multiply to the norm of the whole transform."""
    a = rng_array((6, 5, 8), np.complex128, 1)
    for norm in NORMS:
        local = _RustLocal(norm, 1)
        got = local.c2c(local.c2c(a, (2,), False), (0, 1), False)
        assert rel(got, np.fft.fftn(a, norm=norm)) < 1e-12


def test_cpu_default_is_the_core() -> None:
    if not cudecomp.CPU_ONLY:
        pytest.skip("the GPU variant's local FFTs are CuPy's")
    assert isinstance(_make_local("auto", "backward", None), _RustLocal)
    assert _make_local("rustfft", "backward", 4).threads == 4  # type: ignore[attr-defined]
    assert _make_local("numpy", "backward", None).name == "numpy"
    with pytest.raises(cudecomp.InvalidUsageError, match="fft_library 'fftw'"):
        _make_local("fftw", "backward", None)


def test_argument_checks() -> None:
    f = _cudecomp._local_fft
    a = rng_array((4, 8), np.complex128, 0)
    r = rng_array((4, 8), np.float64, 0)
    with pytest.raises(TypeError, match="NumPy array"):
        f("c2c", [1, 2], a, [1])
    with pytest.raises(TypeError, match="do not fit"):
        f("c2c", a, np.empty((4, 8), np.complex64), [1])
    with pytest.raises(TypeError, match="do not fit"):
        f("r2c", a, np.empty((4, 5), np.complex128), [1])
    with pytest.raises(cudecomp.InvalidUsageError, match="does not fit"):
        f("c2c", a, np.empty((4, 9), np.complex128), [1])
    with pytest.raises(cudecomp.InvalidUsageError, match="does not fit"):
        f("r2c", r, np.empty((4, 4), np.complex128), [1])
    with pytest.raises(cudecomp.InvalidUsageError, match="out of range"):
        f("c2c", a, np.empty_like(a), [2])
    with pytest.raises(cudecomp.InvalidUsageError, match="contiguous one"):
        f("r2c", r, np.empty((4, 5), np.complex128), [0])
    with pytest.raises(cudecomp.InvalidUsageError, match="twice"):
        f("c2c", a, np.empty_like(a), [1, -1])
    with pytest.raises(cudecomp.InvalidUsageError, match="kind"):
        f("dct", a, np.empty_like(a), [1])
    ro = np.empty_like(a)
    ro.flags.writeable = False
    with pytest.raises(cudecomp.InvalidUsageError, match="writable"):
        f("c2c", a, ro, [1])
    big = rng_array((4, 16), np.complex128, 0)
    with pytest.raises(cudecomp.InvalidUsageError, match="overlaps"):
        f("c2c", big.reshape(-1)[:32].reshape(4, 8), big.reshape(-1)[8:40].reshape(4, 8), [1])
    with pytest.raises(cudecomp.InvalidUsageError, match="C-contiguous"):
        f("c2c", big[:, ::2], np.empty((4, 8), np.complex128), [1])
    # In place, an empty array and a scale.
    b = a.copy()
    f("c2c", b, b, [1], False, 0.5, 2)
    assert rel(b, 0.5 * np.fft.fft(a, axis=1)) < 1e-12
    e = np.empty((0, 8), np.complex128)
    f("c2c", e, np.empty_like(e), [1])


def test_threads_of_a_plan(handle: cudecomp.Handle) -> None:
    """The plan's rustfft transforms run on the handle's host threads unless ``workers`` says."""
    if not cudecomp.CPU_ONLY:
        pytest.skip("CPU variant")
    from mpi4py import MPI

    pd = (1, MPI.COMM_WORLD.size)
    with cudecomp.fft.FFT(handle, (8, 8, 8), pd) as plan:
        assert plan._local.threads == _cudecomp._host_threads(handle) >= 1  # type: ignore[attr-defined]
        assert "rustfft" in repr(plan)
    with cudecomp.fft.FFT(handle, (8, 8, 8), pd, workers=2) as plan:
        assert plan._local.threads == 2  # type: ignore[attr-defined]
