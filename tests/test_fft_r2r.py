"""Cosine and sine transforms in ``cudecomp.fft`` plans against ``scipy.fft`` on the gathered global arrays.

Per-axis transforms (``transforms=``) of every type, mixed with FFT axes (``r2c`` along X,
or complex data from the first FFT axis when X is a cosine or sine axis), every norm,
both precisions, natural and transposed output, every process grid of the rank count.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_data_path
from cudecomp.fft import FFT
from oracle import device, factor_pairs, gather, local_part, make_plan, random_field, rel, to_host

sfft = pytest.importorskip("scipy.fft")

pytestmark = [pytest.mark.mpi, requires_data_path()]

COMM = MPI.COMM_WORLD
PDIMS = factor_pairs(COMM.size)
TYPES = ["dct1", "dct2", "dct3", "dct4", "dst1", "dst2", "dst3", "dst4"]


def reference(A: np.ndarray, transforms: tuple[str, str, str], norm: str) -> np.ndarray:
    """``scipy.fft`` of the global array ``A[z, y, x]``: along each global axis its transform."""
    out: Any = A.astype(np.float64)
    if transforms[0] == "fft":
        out = sfft.rfft(out, axis=2, norm=norm)
    for g, t in enumerate(transforms):
        axis = 2 - g
        if t == "fft":
            if g:
                out = sfft.fft(out, axis=axis, norm=norm)
        else:
            out = getattr(sfft, t[:3])(out, type=int(t[3]), axis=axis, norm=norm)
    return out


def inverse_reference(S: np.ndarray, transforms: tuple[str, str, str], norm: str, gdims: tuple[int, int, int]) -> np.ndarray:
    """The inverse of ``reference`` (``idct``/``idst``, ``ifft``, ``irfft`` along X last)."""
    out: Any = S
    for g, t in enumerate(transforms):
        axis = 2 - g
        if t == "fft":
            if g:
                out = sfft.ifft(out, axis=axis, norm=norm)
        else:
            out = getattr(sfft, "i" + t[:3])(out, type=int(t[3]), axis=axis, norm=norm)
    if transforms[0] == "fft":
        out = sfft.irfft(out, n=gdims[0], axis=2, norm=norm)
    elif "fft" in transforms:
        out = out.real
    return np.asarray(out)


def check(plan: FFT, tol: float, seed: int) -> None:
    """Forward against scipy, backward of an independent spectrum, and the round trip."""
    A = random_field(plan.gdims, plan.input_dtype, seed)
    a = device(local_part(A, plan.input_info))
    spec = plan.forward(a)
    assert spec.dtype == plan.output_dtype and tuple(spec.shape) == plan.output_info.array_shape
    ref = reference(A, plan.transforms, plan.norm)
    assert ref.shape == plan.spectral_gdims[::-1]
    assert rel(gather(spec, plan.output_info, ref.shape), ref) < tol, "forward"
    back = plan.backward(spec)
    assert rel(to_host(back), to_host(a)) < tol, "round trip"
    assert rel(to_host(a), local_part(A, plan.input_info)) == 0, "forward modified its input"
    # Backward of a spectrum the forward of another real field makes.
    S = reference(random_field(plan.gdims, np.float64, seed + 1), plan.transforms, plan.norm)
    s = device(local_part(S.astype(plan.output_dtype), plan.output_info))
    kept = to_host(s).copy()
    expect = inverse_reference(S, plan.transforms, plan.norm, plan.gdims)
    assert rel(gather(plan.backward(s), plan.input_info, expect.shape), expect) < tol, "backward"
    assert np.array_equal(to_host(s), kept), "backward modified its input"


MIXES = [
    ("dct2", "dct2", "dct2"),
    ("fft", "dct2", "fft"),
    ("dst1", "fft", "dct1"),
    ("fft", "fft", "dst2"),
    ("dct3", "dst4", "dct4"),
    ("dst3", "fft", "fft"),
]


@pytest.mark.parametrize("pdims", PDIMS, ids=lambda p: f"{p[0]}x{p[1]}")
@pytest.mark.parametrize("transposed", [False, True], ids=["natural", "transposed"])
@pytest.mark.parametrize("transforms", MIXES, ids="-".join)
def test_mixes_match_scipy(handle: cudecomp.Handle, transforms: tuple[str, str, str], transposed: bool, pdims: tuple[int, int]) -> None:
    kind = "r2c" if transforms[0] == "fft" else "r2r"
    plan = make_plan(handle, (7, 6, 5), pdims, kind=kind, transforms=transforms, transposed_out=transposed)
    if plan is not None:
        with plan:
            assert plan.kind == kind and plan.transforms == transforms
            check(plan, 1e-12, 11)


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
@pytest.mark.parametrize("kind", TYPES)
def test_every_type_and_norm(handle: cudecomp.Handle, kind: str, norm: str) -> None:
    pdims = PDIMS[-1]
    transforms = (kind, "fft", kind) if kind != "dct1" else (kind, kind, "fft")
    plan = make_plan(handle, (6, 5, 7), pdims, transforms=transforms, norm=norm)
    if plan is not None:
        with plan:
            check(plan, 1e-12, 3)


@pytest.mark.parametrize("transforms", [("dct2", "dct2", "dct2"), ("fft", "dst2", "dct2")], ids="-".join)
def test_single_precision(handle: cudecomp.Handle, transforms: tuple[str, str, str]) -> None:
    plan = make_plan(handle, (8, 6, 7), PDIMS[0], transforms=transforms, dtype=np.float32, norm="ortho")
    if plan is not None:
        with plan:
            assert plan.input_dtype == np.float32
            check(plan, 5e-5, 5)


def test_helpers_on_cosine_and_sine_axes(handle: cudecomp.Handle) -> None:
    with FFT(handle, (8, 6, 7), PDIMS[0], transforms=("fft", "dct2", "dst1")) as plan:
        kx, ky, kz = (to_host(k) for k in plan.wavenumbers((2.0, 3.0, 4.0)))
        info = plan.output_info
        gy = np.arange(6)[info.global_slices[1]]
        gz = np.arange(7)[info.global_slices[0]]
        assert np.allclose(np.ravel(ky), np.pi * gy / 3.0) and np.allclose(np.ravel(kz), np.pi * (gz + 1) / 4.0)
        _, ey, ez = (to_host(e) for e in plan.eigenvalues((2.0, 3.0, 4.0), operator="fd2"))
        hy, hz = 3.0 / 6, 4.0 / 8
        assert np.allclose(np.ravel(ey), -(2 - 2 * np.cos(np.pi * gy / 6)) / hy**2)
        assert np.allclose(np.ravel(ez), -(2 - 2 * np.cos(np.pi * (gz + 1) / 8)) / hz**2)
        _, y, z = (to_host(c) for c in plan.coordinates((2.0, 3.0, 4.0)))
        iy, iz = np.arange(6)[plan.input_info.global_slices[1]], np.arange(7)[plan.input_info.global_slices[0]]
        assert np.allclose(np.ravel(y), (iy + 0.5) * hy) and np.allclose(np.ravel(z), (iz + 1) * hz)


def test_bad_transforms_raise_on_every_rank(handle: cudecomp.Handle) -> None:
    last = COMM.rank == COMM.size - 1
    Invalid = cudecomp.InvalidUsageError
    with pytest.raises(Invalid, match=r"transforms\[1\] 'dct5': expected one of"):
        FFT(handle, (6, 6, 6), PDIMS[0], transforms=("fft", "dct5", "fft"))
    with pytest.raises(TypeError, match="transforms"):
        FFT(handle, (6, 6, 6), PDIMS[0], transforms="dct2")
    with pytest.raises(Invalid, match=r"transforms\[2\] 'dct1': needs at least 2 points"):
        FFT(handle, (6, 6, 1), PDIMS[0], transforms=("fft", "fft", "dct1"))
    with pytest.raises(Invalid, match="cosine and sine transforms take real data"):
        FFT(handle, (6, 6, 6), PDIMS[0], kind="c2c", transforms=("fft", "dct2", "fft"))
    with pytest.raises(TypeError, match="takes float32 or float64"):
        FFT(handle, (6, 6, 6), PDIMS[0], dtype=np.complex128, transforms=("dct2", "dct2", "fft"))
    with pytest.raises(Invalid, match="r2c halves X"):
        FFT(handle, (6, 6, 6), PDIMS[0], kind="r2c", transforms=("dct2", "fft", "fft"))
    if COMM.size > 1:
        # One rank's transforms differ: every rank raises naming them.
        with pytest.raises(Invalid, match="transforms is"):
            FFT(handle, (6, 6, 6), PDIMS[0], transforms=("fft", "dst2" if last else "dct2", "fft"))
        with pytest.raises(Invalid if not last else TypeError):
            FFT(handle, (6, 6, 6), PDIMS[0], transforms=[1, 2, 3] if last else ("fft", "dct2", "fft"))
    if cudecomp.CPU_ONLY:
        with pytest.raises(cudecomp.NotSupportedError, match="no cosine or sine transforms"):
            FFT(handle, (6, 6, 6), PDIMS[0], transforms=("fft", "dct2", "fft"), fft_library="numpy")
    # The handle works on.
    with FFT(handle, (6, 6, 6), PDIMS[0], transforms=("fft", "dct2", "fft")) as plan:
        check(plan, 1e-12, 1)


@pytest.mark.skipif(not cudecomp.CPU_ONLY, reason="the GPU variant transforms with cupy")
def test_scipy_library_gives_the_same(handle: cudecomp.Handle) -> None:
    plan = make_plan(handle, (7, 6, 5), PDIMS[-1], kind="r2c", transforms=("fft", "dct2", "dst3"), fft_library="scipy")
    if plan is not None:
        with plan:
            check(plan, 1e-12, 2)


def _fused_cases() -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[str, ...], bool, str]]:
    """Shapes (odd, even, of length 1), every axis subset, cosine and sine mixed, both families, every norm."""
    import itertools

    cases = []
    # An even last axis not transformed sends the leading axes' rows through complex FFTs in pairs.
    for shape in [(5, 6, 7), (4, 1, 3), (8,), (3, 5), (5, 4, 6), (7, 2)]:
        nd = len(shape)
        for r in range(1, nd + 1):
            for axes in itertools.combinations(range(nd), r):
                for k, (inverse, t) in enumerate([(False, 2), (False, 3), (True, 2), (True, 3)]):
                    kinds = tuple(("dst" if (g + k) % 2 else "dct") + str(t) for g in axes)
                    cases.append((shape, axes, kinds, inverse, ["backward", "ortho", "forward"][(len(cases)) % 3]))
    return cases


@pytest.mark.gpu
@pytest.mark.parametrize("shape, axes, kinds, inverse, norm", _fused_cases())
def test_fused_type_2_and_3_kernels_match_scipy(
    shape: tuple[int, ...], axes: tuple[int, ...], kinds: tuple[str, ...], inverse: bool, norm: str
) -> None:
    """The GPU's several-axes type-II/III transform (``_gpu_dct``) against ``scipy.fft`` one axis at a time."""
    import cupy

    from cudecomp.fft._gpu_dct import dct23

    x = np.random.default_rng(len(shape) * 7 + len(axes)).standard_normal(shape)
    expect: Any = x
    for g, kind in zip(axes, kinds, strict=True):
        expect = getattr(sfft, ("i" if inverse else "") + kind[:3])(expect, type=int(kind[3]), axis=g, norm=norm)
    got = cupy.asnumpy(dct23(cupy.asarray(x), axes, kinds, inverse, norm))
    assert rel(got, expect) < 1e-13
    out = cupy.empty(shape, np.float32)
    dct23(cupy.asarray(x, np.float32), axes, kinds, inverse, norm, out)
    assert rel(cupy.asnumpy(out), expect) < 2e-6
