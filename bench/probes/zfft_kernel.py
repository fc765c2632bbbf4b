"""The FFT along Z of an X-fastest Z-pencil: cudecomp's strided kernel against cuFFT, on one GPU (issue 19).

Checks the kernel (``cudecomp.fft._zfft``) against ``cupy.fft.fft`` along axis 0 for
lengths it takes (powers of two and 2-3-5 mixed radix), both precisions and directions, whole arrays and slabs of rows
(column counts that are not a multiple of a block's), then times it against cuFFT's
strided plan on one rank's half of an N^3 complex128 or complex64 transform over two GPUs (the
forward's tail), in place and out of place, unscaled and with the norm's scale (the
backward's streamed step, where cuFFT needs a pass of its own for the scale), and with
this rank's own half of the rows read from or written to the Y-pencil (the streamed
transforms leave their own cells there instead of copying them).

    python3 bench/probes/zfft_kernel.py --n 1024 768 512
"""

from __future__ import annotations

import argparse

import cupy as cp
import numpy as np
from cupy.cuda import cufft
from fft_slab_parts import timed  # beside this script

from cudecomp.fft._zfft import StridedFFT, supported


def rel(a, b) -> float:
    """Largest difference relative to the largest magnitude of ``b``."""
    return float(cp.abs(a - b).max() / cp.abs(b).max())


def check(k: StridedFFT) -> None:
    """Largest relative error against cupy.fft.fft for each length, precision and direction."""
    rng = np.random.default_rng(0)
    for dt, tol in ((np.complex128, 1e-13), (np.complex64, 1e-5)):
        worst = 0.0
        for n in [*(1 << b for b in range(4, 11)), 24, 48, 96, 125, 243, 384, 720, 768, 960]:
            assert supported(n, dt)
            x = cp.asarray((rng.standard_normal((n, 3, 7)) + 1j * rng.standard_normal((n, 3, 7))).astype(dt))
            for inverse in (False, True):
                want = cp.fft.ifft(x, axis=0) * n if inverse else cp.fft.fft(x, axis=0)
                got = cp.empty_like(x)
                k(x, got, inverse)
                worst = max(worst, rel(got, want))
                y = x.copy()
                k(y, y, inverse, 0.5)  # in place, scaled
                worst = max(worst, rel(y, want * 0.5))
                z = x.copy()
                k(z[:, 1:3], z[:, 1:3], inverse)  # a slab of rows: row stride 21, 14 columns
                worst = max(worst, rel(z[:, 1:3], want[:, 1:3]))
                assert bool((z[:, 0] == x[:, 0]).all()), "rows outside the slab changed"
        print(f"{np.dtype(dt).name}: largest relative error over the lengths {worst:.2e} (tolerance {tol:.0e})")
        assert worst < tol, worst


def measure(n: int, dtype: type, reps: int) -> None:
    """Time cuFFT's strided plan and the kernel on one rank's (N, N/2, N) Z-pencil."""
    z = cp.ones((n, n // 2, n), dtype)  # this rank's Z-pencil, X fastest
    w = cp.empty_like(z)
    t_ = cufft.CUFFT_Z2Z if dtype == np.complex128 else cufft.CUFFT_C2C
    plan = cufft.PlanNd((n,), (n,), n // 2 * n, 1, (n,), n // 2 * n, 1, t_, n // 2 * n, "C", 0, None)
    k = StridedFFT()
    narrow = StridedFFT(64 // z.dtype.itemsize)
    t = {
        "cuFFT in place": timed(lambda: plan.fft(z, z, cufft.CUFFT_FORWARD), reps),
        "cuFFT out of place": timed(lambda: plan.fft(z, w, cufft.CUFFT_FORWARD), reps),
        "cuFFT + scale pass": timed(lambda: (plan.fft(z, z, cufft.CUFFT_INVERSE), z.__imul__(0.5)), reps),
        "copy (the floor)": timed(lambda: w.__setitem__(Ellipsis, z), reps),
        "kernel in place, 64-byte rows": timed(lambda: narrow(z, z, False), reps),
        "kernel in place": timed(lambda: k(z, z, False), reps),
        "kernel out of place": timed(lambda: k(z, w, False), reps),
        "kernel scaled": timed(lambda: k(z, z, True, 0.5), reps),
    }
    chunks = 8

    def slabs() -> None:
        for j in range(chunks):
            lo, hi = n // 2 * j // chunks, n // 2 * (j + 1) // chunks
            k(z[:, lo:hi], w[:, lo:hi], True, 0.5)

    t[f"kernel scaled in {chunks} slabs of rows"] = timed(slabs, reps)
    # The streamed transforms' own cells: half the Z rows live in the Y-pencil (N/2 Z
    # planes of N x N), read from there (forward's tail) or written there (backward).
    y = cp.ones((n // 2, n, n), dtype)
    own = y[:, : n // 2]
    t["kernel out of place, half the rows read from the Y-pencil"] = timed(lambda: k(z, w, False, a_rows=(0, own)), reps)

    def own_slabs() -> None:
        for j in range(chunks):
            lo, hi = n // 2 * j // chunks, n // 2 * (j + 1) // chunks
            k(z[:, lo:hi], w[:, lo:hi], True, 0.5, out_rows=(0, own[:, lo:hi]))

    t[f"kernel scaled in {chunks} slabs, half the rows written to the Y-pencil"] = timed(own_slabs, reps)
    print(f"N={n}: Z-pencil {z.nbytes / 2**30:.1f} GiB {np.dtype(dtype).name} ({n} x {n // 2} x {n})")
    for name, ms in t.items():
        print(f"  {name}: {ms:.2f} ms ({2 * z.nbytes / ms / 1e6:.0f} GB/s of one read and one write)")
    x = (cp.random.default_rng(1).standard_normal((n, n // 2, n)) + 0j).astype(dtype)
    ref = cp.empty_like(x)
    plan.fft(x, ref, cufft.CUFFT_FORWARD)
    k(x, x, False)
    print(f"  kernel vs cuFFT: relative {rel(x, ref):.2e}")


def main() -> None:
    """Check, then time each variant."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="+", default=[1024, 512])
    p.add_argument("--reps", type=int, default=7)
    a = p.parse_args()
    check(StridedFFT())
    for n in a.n:
        for dtype in (np.complex128, np.complex64):
            measure(n, dtype, a.reps)
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
