"""How the planes per cuFFT call change the cost of batched 2-D FFTs (issue 19).

The streamed slab-xy schedule runs 2-D FFTs over (Y, X) of one rank's Z planes (half of
N^3 over two GPUs): forward in slabs beside the exchange, backward after it, where they
are the whole tail (9.9 ms at 1024^3 complex128 in 8 slabs: two passes over HBM). One
plane of 1024^2 complex128 is 16 MiB, less than an H200's L2 (60 MB), so a call over few
planes might keep its second pass in cache. Times, out of place, the planes of the array
in calls of ``b`` planes for several ``b``, on one or more streams taking calls in turn.

    python3 bench/probes/fft2_batch.py --n 1024 768 --batches 1 2 4 8 64 512 --streams 1 2 4
"""

from __future__ import annotations

import argparse
from typing import Any

import cupy as cp
import numpy as np
from cupy.cuda import cufft
from cupyx.scipy.fft import get_fft_plan
from fft_slab_parts import timed  # this folder's probe (run as a script, it is on the path)


def run(n: int, dtype: type, batches: list[int], streams: list[int], reps: int) -> None:
    """Print the time of every (planes per call, streams) pair at size ``n``."""
    x = cp.ones((n // 2, n, n), dtype)
    y = cp.empty_like(x)
    print(f"N={n} {np.dtype(dtype).name}: {x.nbytes / 2**30:.2f} GiB; copy {timed(lambda: cp.copyto(y, x), reps):.2f} ms")
    main = cp.cuda.get_current_stream()
    for b in batches:
        plan = get_fft_plan(x[:b], axes=(1, 2), value_type="C2C")
        tail = x.shape[0] % b
        last = get_fft_plan(x[:tail], axes=(1, 2), value_type="C2C") if tail else None
        for count in streams:
            ss = [cp.cuda.Stream(non_blocking=True) for _ in range(count)]

            def calls(ss: list = ss, plan: Any = plan, last: Any = last, b: int = b) -> None:
                fork = cp.cuda.Event(disable_timing=True)
                fork.record(main)
                for s in ss:
                    s.wait_event(fork)
                for j, lo in enumerate(range(0, x.shape[0], b)):
                    hi = min(lo + b, x.shape[0])
                    p = plan if hi - lo == b else last
                    with ss[j % len(ss)]:
                        p.fft(x[lo:hi], y[lo:hi], cufft.CUFFT_INVERSE)
                for s in ss:
                    join = cp.cuda.Event(disable_timing=True)
                    join.record(s)
                    main.wait_event(join)

            print(f"  {b:4d} planes per call, {count} stream(s): {timed(calls, reps):.2f} ms")


def main() -> None:
    """Parse the arguments and time every case."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="+", default=[1024])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 64, 512])
    p.add_argument("--streams", type=int, nargs="+", default=[1, 2])
    p.add_argument("--dtypes", nargs="+", default=["c128"], choices=["c64", "c128"])
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    for n in a.n:
        for d in a.dtypes:
            run(n, cp.complex128 if d == "c128" else cp.complex64, [b for b in a.batches if b <= n // 2], a.streams, a.reps)


if __name__ == "__main__":
    main()
