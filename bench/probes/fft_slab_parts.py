"""Stage costs of the streamed slab-xy FFT on one GPU (issue 19), to predict it on two.

Times, on one rank's share of an N^3 complex transform over two GPUs (N/2 Z planes):
the 2-D FFTs over (Y, X) whole and in slabs (cuFFT plans executed into slices of one
array, as ``cudecomp.fft`` streams them); the 1-D FFT along Z of the X-fastest Z-pencil
(a strided cuFFT plan) against the contiguous one of the Z-fastest layout, and in slabs of
Y rows (the streamed backward transform); a copy-engine
copy of half the pencil (2-D, whole planes: the shape of the chunk DIRECT sends to the
peer, here into local memory); and the slabbed 2-D FFTs with that copy running beside
them on another stream, to see whether cuFFT and the copy engine slow each other.
Then the stages of other schedules (``--alternatives``): the backward's X FFT moved
ahead of the exchange ((Z, X) 2-D FFTs in slabs of Y rows) leaving the FFT along Y alone
after it (no single cuFFT layout: one plane per call, on one or four streams); the X FFT
alone; the Z FFT split by one radix-2 step into two half-length FFTs; the norm's scale
pass; and whether cuFFT accepts a JIT link-time store callback (a scale fused into the
transform's stores) here.

    python3 bench/probes/fft_slab_parts.py --n 1024 --chunks 4 [--alternatives]
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
    p.add_argument("--alternatives", action="store_true", help="also time the stages of other schedules")
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
    if a.alternatives:
        alternatives(x, y, z, max(a.chunks), a.reps)


def z2z(n: tuple[int, ...], embed: tuple[int, ...], stride: int, dist: int, batch: int) -> cufft.PlanNd:
    """Return a complex128 cuFFT plan with the same layout on both sides."""
    return cufft.PlanNd(n, embed, stride, dist, embed, stride, dist, cufft.CUFFT_Z2Z, batch, "C", 0, None)


def alternatives(x: cp.ndarray, y: cp.ndarray, z: cp.ndarray, chunks: int, reps: int) -> None:
    """Print the stage times of the schedules not taken (see the module docstring)."""
    nz, ny, nx = z.shape
    inv = cufft.CUFFT_INVERSE
    cuts = [slice(ny * j // chunks, ny * (j + 1) // chunks) for j in range(chunks)]
    zx = z2z((nz, nx), (nz, ny * nx), 1, nx, ny // chunks)
    zo = y.reshape(z.shape)  # out of place, into the Y-pencil's memory
    print(f"(Z, X) 2-D FFT in {chunks} slab(s) of Y rows: {timed(lambda: [zx.fft(z[:, c], zo[:, c], inv) for c in cuts], reps):.2f} ms")
    xp = z2z((nx,), (nx,), 1, nx, x.shape[0] * x.shape[1])
    print(f"X FFT of the Y-pencil (contiguous): {timed(lambda: xp.fft(x, y, inv), reps):.2f} ms")
    planes, rows = x.shape[0], x.shape[1]
    yp = [z2z((rows,), (rows,), nx, 1, nx) for _ in range(4)]
    main = cp.cuda.get_current_stream()
    for count in (1, 4):
        streams = [cp.cuda.Stream(non_blocking=True) for _ in range(count)]

        def yplanes(streams: list[cp.cuda.Stream] = streams) -> None:
            fork = cp.cuda.Event(disable_timing=True)
            fork.record(main)
            for s in streams:
                s.wait_event(fork)
            for i in range(planes):
                with streams[i % len(streams)]:
                    yp[i % len(streams)].fft(x[i], y[i], inv)
            for s in streams:
                join = cp.cuda.Event(disable_timing=True)
                join.record(s)
                main.wait_event(join)

        print(f"Y FFT of the Y-pencil, one plane per call on {count} stream(s): {timed(yplanes, reps):.2f} ms")
    h = nz // 2
    half = z2z((h,), (h,), ny * nx, 1, ny * nx)

    def two() -> None:
        half.fft(z[:h], zo[:h], inv)
        half.fft(z[h:], zo[h:], inv)

    print(f"Z FFT as two half-length FFTs (after a radix-2 split): {timed(two, reps):.2f} ms")
    split = cp.ElementwiseKernel(
        "raw complex128 x, int64 half, int64 plane, int64 n",
        "raw complex128 out",
        """
        long long p = i / plane;
        complex<double> a = x[i], b = x[i + half];
        double t = -2.0 * M_PI * (double)p / (double)n;
        out[i] = a + b;
        out[i + half] = (a - b) * complex<double>(cos(t), sin(t));
        """,
        "radix2_split",
    )
    m = h * ny * nx
    print(f"radix-2 split of Z (one fused pass): {timed(lambda: split(z, m, ny * nx, nz, zo, size=m), reps):.2f} ms")
    print(f"scale pass (y *= s): {timed(lambda: y.__imul__(0.5), reps):.2f} ms")
    print(f"cuFFT JIT store callbacks (a fused scale): {callbacks()}")


def callbacks() -> str:
    """Whether cuFFT runs a JIT link-time store callback here (through CuPy), as a short verdict."""
    src = (
        'extern "C" __device__ void half_store(void *out, unsigned long long i, double2 v, void *info, void *shared)\n'
        "{ double2 r; r.x = v.x * 0.5; r.y = v.y * 0.5; static_cast<double2 *>(out)[i] = r; }\n"
    )
    a = cp.ones((4, 64), dtype=cp.complex128)
    try:
        with cp.fft.config.set_cufft_callbacks(cb_store=src, cb_store_name="half_store", cb_ver="jit"):
            r = cp.fft.fft(a)
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return f"unavailable ({type(e).__name__}: {e})"
    return "available" if bool(cp.allclose(r, 0.5 * cp.fft.fft(a))) else "runs but does not scale"


if __name__ == "__main__":
    main()
