"""Time the local cuFFT stages of the streamed slab-xy FFT, and their alternatives, on one GPU.

The two-GPU 1024³ complex128 FFT is bound by HBM passes: each rank's local FFTs share
memory bandwidth with the copy engine's exchange, and the stage after the last slab (the
tail) adds to the wall time in full. This script measures what each candidate stage
costs for one rank's half of the array, so a schedule can be judged before a two-GPU
run. Usage (GPU variant installed, CuPy present): ``python3 scripts/fft_stages.py [N]``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import cupy as cp
from cupy.cuda import cufft

Z2Z = cufft.CUFFT_Z2Z
INV, FWD = cufft.CUFFT_INVERSE, cufft.CUFFT_FORWARD


def timed(name: str, fn: Callable[[], Any], reps: int = 5) -> None:
    """Print the median GPU time of ``fn`` over ``reps`` runs after one warm-up."""
    fn()
    cp.cuda.runtime.deviceSynchronize()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    print(f"{name:58s} {sorted(times)[reps // 2]:8.3f} ms", flush=True)


def plan(n: tuple[int, ...], embed: tuple[int, ...], stride: int, dist: int, batch: int) -> Any:
    """Return a complex128 cuFFT plan with the same layout on both sides."""
    return cufft.PlanNd(n, embed, stride, dist, embed, stride, dist, Z2Z, batch, "C", 0, None)


def on_streams(count: int, items: int, step: Callable[[int, int], None]) -> Callable[[], None]:
    """Return a runner of ``step(item, stream_index)`` for every item, round-robin over ``count`` streams."""
    main = cp.cuda.get_current_stream()
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(count)]
    fork, joins = cp.cuda.Event(disable_timing=True), [cp.cuda.Event(disable_timing=True) for _ in range(count)]

    def run() -> None:
        fork.record(main)
        for s in streams:
            s.wait_event(fork)
        for i in range(items):
            with streams[i % count]:
                step(i, i % count)
        for s, e in zip(streams, joins, strict=True):
            e.record(s)
            main.wait_event(e)

    return run


def callbacks_available() -> str:
    """Whether cuFFT accepts a JIT link-time store callback here (CuPy's own path), as a short verdict."""
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


def main() -> None:
    """Measure every stage for an N³ array split over two ranks (one rank's half)."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    h, slabs = n // 2, 8
    rows = h // slabs
    y = cp.random.random((h, n, n)) + 1j * cp.random.random((h, n, n))  # Y-pencil (Z/2, Y, X)
    o = cp.empty_like(y)
    z, oz = y.reshape(n, h, n), o.reshape(n, h, n)  # the same memory as a Z-pencil (Z, Y/2, X)
    print(f"{n}^3 complex128, one rank of two: {y.nbytes / 2**30:.0f} GiB per pencil; cuFFT {cufft.getVersion()}")

    yx = plan((n, n), (n, n), 1, n * n, h)
    timed("2-D (Y,X) FFTs of the Y-pencil (forward work; backward tail)", lambda: yx.fft(y, o, INV))
    zf = plan((n,), (n,), h * n, 1, h * n)
    timed("Z FFT of the Z-pencil, strided (forward tail)", lambda: zf.fft(z, oz, FWD))
    cuts = [slice(k * rows, (k + 1) * rows) for k in range(slabs)]
    zs = plan((n,), (n,), h * n, 1, rows * n)
    timed(f"Z FFT in {slabs} slabs of Y rows (backward work)", lambda: [zs.fft(z[:, c], oz[:, c], INV) for c in cuts])
    zx = plan((n, n), (n, h * n), 1, n, rows)
    timed(f"(Z,X) 2-D FFT in {slabs} slabs of Y rows (X moved ahead)", lambda: [zx.fft(z[:, c], oz[:, c], INV) for c in cuts])
    timed("scale pass, a *= s (the norm's factor)", lambda: o.__imul__(0.5))
    x = plan((n,), (n,), 1, n, h * n)
    timed("X FFT of the Y-pencil, contiguous", lambda: x.fft(y, o, INV))
    yp = [plan((n,), (n,), n, 1, n) for _ in range(4)]
    for count in (1, 4):
        run = on_streams(count, h, lambda i, j: yp[j].fft(y[i], o[i], INV))
        timed(f"Y FFT of the Y-pencil, one plane per call, {count} stream(s)", run)
    z2 = plan((h,), (h,), h * n, 1, h * n)
    timed("Z as two N/2-point strided FFTs (after a radix-2 split)", lambda: (z2.fft(z[:h], oz[:h], FWD), z2.fft(z[h:], oz[h:], FWD)))
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
    timed("radix-2 split of Z, one fused pass", lambda: split(z, h * h * n, h * n, n, oz, size=h * h * n))
    print(f"cuFFT JIT store callbacks (a fused scale): {callbacks_available()}")


if __name__ == "__main__":
    main()
