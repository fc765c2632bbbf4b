"""Stage costs of the streamed slab-xy FFT on one GPU (issue 19), to predict it on two.

Times, on one rank's share of an N^3 complex transform over two GPUs (N/2 Z planes):
the 2-D FFTs over (Y, X) whole and in slabs (cuFFT plans executed into slices of one
array, as ``cudecomp.fft`` streams them); the 1-D FFT along Z of the X-fastest Z-pencil
(a strided cuFFT plan) against the contiguous one of the Z-fastest layout, and in slabs of
Y rows (the streamed backward transform); a copy-engine
copy of half the pencil (2-D, whole planes: the shape of the chunk DIRECT sends to the
peer, here into local memory); and the slabbed 2-D FFTs with that copy running beside
them on another stream, to see whether cuFFT and the copy engine slow each other.

    python3 bench/probes/fft_slab_parts.py --n 1024 --chunks 4
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import cupy as cp
import numpy as np
from cupy.cuda import cufft
from cupy.fft._fft import _get_cufft_plan_nd
from cupyx.scipy.fft import get_fft_plan


def timed(f, reps: int) -> float:
    """Median milliseconds of ``f`` (CUDA events on the current stream) after one warm-up."""
    f()
    out = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        f()
        b.record()
        b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(out))


def main() -> None:
    """Print each stage's median time."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--chunks", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    n = a.n
    x = cp.ones((n // 2, n, n), cp.complex128)  # this rank's Y-pencil (Z/2 planes)
    y = cp.empty_like(x)
    z = cp.empty((n, n // 2, n), cp.complex128)  # its Z-pencil, X fastest
    gib = x.nbytes / 2**30
    print(f"N={n}: pencil {gib:.1f} GiB (complex128)")

    plans: dict[tuple[int, ...], object] = {}  # made once, as the library caches them

    def fft2(chunks: int) -> None:
        cuts = [x.shape[0] * (j + 1) // chunks for j in range(chunks)]
        lo = 0
        for hi in cuts:
            part = x[lo:hi]
            if part.shape not in plans:
                plans[part.shape] = get_fft_plan(part, axes=(1, 2), value_type="C2C")
            plans[part.shape].fft(part, y[lo:hi], cufft.CUFFT_FORWARD)
            lo = hi

    for c in a.chunks:
        print(f"2-D FFT over (Y, X) in {c} slab(s): {timed(lambda c=c: fft2(c), a.reps):.2f} ms")
    zplan = _get_cufft_plan_nd(z.shape, cufft.CUFFT_Z2Z, axes=(0,), order="C", to_cache=False)
    print(f"Z FFT, X-fastest Z-pencil (strided plan, in place): {timed(lambda: zplan.fft(z, z, cufft.CUFFT_FORWARD), a.reps):.2f} ms")
    zc = z.reshape(n // 2 * n, n)
    cplan = get_fft_plan(zc, axes=(1,), value_type="C2C")
    print(f"Z FFT, Z-fastest Z-pencil (contiguous, in place): {timed(lambda: cplan.fft(zc, zc, cufft.CUFFT_FORWARD), a.reps):.2f} ms")
    zplans: dict[int, object] = {}

    def zslabs(chunks: int) -> None:
        # The backward stage: the FFT along Z in slabs of Y rows, each through the views' pointers.
        nz, ny, nx = z.shape
        lo = 0
        for j in range(chunks):
            hi = ny * (j + 1) // chunks
            if hi - lo not in zplans:
                zplans[hi - lo] = cufft.PlanNd((nz,), (nz,), ny * nx, 1, (nz,), ny * nx, 1, cufft.CUFFT_Z2Z, (hi - lo) * nx, "C", 0, None)
            zplans[hi - lo].fft(z[:, lo:hi], z[:, lo:hi], cufft.CUFFT_INVERSE)
            lo = hi

    for c in a.chunks:
        print(f"Z FFT, X-fastest Z-pencil, in {c} slab(s) of Y rows: {timed(lambda c=c: zslabs(c), a.reps):.2f} ms")
    print(f"copy of the pencil (cupy.copyto): {timed(lambda: cp.copyto(y, x), a.reps):.2f} ms")
    half = n * n // 2 * 16  # bytes of one plane's half in Y

    def engine() -> None:
        # The chunk for the peer: the second half of every plane, into a packed block.
        cp.cuda.runtime.memcpy2DAsync(
            z.data.ptr,
            half,
            x.data.ptr + half,
            2 * half,
            half,
            n // 2,
            cp.cuda.runtime.memcpyDeviceToDevice,
            cp.cuda.get_current_stream().ptr,
        )

    print(f"copy engine, half of every plane (2-D, {n // 2} rows of {half >> 20} MiB): {timed(engine, a.reps):.2f} ms")
    side = cp.cuda.Stream(non_blocking=True)

    def beside(work: Callable[[], None]) -> None:
        """Run ``work`` on the current stream with the engine copy on ``side`` at the same time."""
        main = cp.cuda.get_current_stream()
        ev = cp.cuda.Event(disable_timing=True)
        ev.record(main)
        side.wait_event(ev)
        with side:
            engine()
        work()
        done = cp.cuda.Event(disable_timing=True)
        done.record(side)
        main.wait_event(done)

    for c in a.chunks:
        print(f"2-D FFT in {c} slab(s) with the engine copy beside it: {timed(lambda c=c: beside(lambda: fft2(c)), a.reps):.2f} ms")
        print(f"Z FFT in {c} slab(s) with the engine copy beside it: {timed(lambda c=c: beside(lambda: zslabs(c)), a.reps):.2f} ms")


if __name__ == "__main__":
    main()
