"""Whole distributed transforms on the core's local FFTs (``fft_library="rustfft"``, the CPU default).

Against numpy.fft on the gathered global arrays (the helpers of ``test_fft``), over every
process grid of the rank count, both kinds and precisions, every norm, natural and
transposed output, and grids whose extents are 1, 2, primes, 2·3·5 mixed and powers of
two (the real axis X among them); one rustfft thread and several. CPU variant only.
"""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from oracle import TOL32, TOL64, check_plan, factor_pairs, make_plan

pytestmark = [pytest.mark.mpi, pytest.mark.skipif(not cudecomp.CPU_ONLY, reason="CPU variant: the core's local FFTs")]

PDIMS = factor_pairs(MPI.COMM_WORLD.size)
GDIMS = [(2, 3, 5), (1, 4, 6), (16, 12, 10), (13, 2, 7), (30, 8, 9), (8, 16, 4)]
NORMS = ["backward", "ortho", "forward"]


@pytest.mark.parametrize("pdims", PDIMS, ids=lambda p: f"{p[0]}x{p[1]}")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", ["c2c", "r2c"])
@pytest.mark.parametrize("gdims", GDIMS, ids=lambda g: "x".join(map(str, g)))
def test_matches_numpy(handle: cudecomp.Handle, gdims: tuple[int, int, int], kind: str, dtype: str, pdims: tuple[int, int]) -> None:
    i = GDIMS.index(gdims) + 2 * ["c2c", "r2c"].index(kind)
    norm, transposed = NORMS[i % 3], bool(i % 2)
    dt = np.dtype(dtype) if kind == "r2c" else np.dtype(np.complex128 if dtype == "float64" else np.complex64)
    plan = make_plan(handle, gdims, pdims, kind=kind, dtype=dt, norm=norm, transposed_out=transposed, fft_library="rustfft")
    if plan is None:
        return
    with plan:
        assert plan._local.name == "rustfft"  # type: ignore[attr-defined]
        check_plan(plan, TOL64 if dtype == "float64" else TOL32, seed=i, reuse=i % 3 == 0)


@pytest.mark.parametrize("norm", NORMS)
def test_threads_and_libraries_agree(handle: cudecomp.Handle, norm: str) -> None:
    """One thread, three threads and numpy.fft give the same spectra (to rounding)."""
    pdims = PDIMS[len(PDIMS) // 2]
    g = (12, 10, 9)
    plans = [
        make_plan(handle, g, pdims, kind="r2c", norm=norm, fft_library=lib, workers=w)
        for lib, w in (("rustfft", 1), ("rustfft", 3), ("numpy", None))
    ]
    if plans[0] is None:
        return
    a = np.random.default_rng(5).standard_normal(plans[0].input_info.array_shape)
    specs = [p.forward(a) for p in plans]  # type: ignore[union-attr]
    backs = [p.backward(s) for p, s in zip(plans, specs, strict=True)]  # type: ignore[union-attr]
    for s, b in zip(specs[1:], backs[1:], strict=True):
        assert np.abs(s - specs[0]).max() <= 1e-12 * np.abs(specs[0]).max()
        assert np.abs(b - backs[0]).max() <= 1e-12 * np.abs(backs[0]).max()
    for p in plans:
        p.destroy()  # type: ignore[union-attr]
