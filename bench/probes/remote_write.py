"""How fast SM kernels move data across NVLink, beside the copy engine (issue #17).

One process drives two GPUs with peer access on.  Each row prints GB/s for one way of
moving ``--gib`` GiB from GPU 0 to GPU 1 (or both ways at once, ``bidir``):

* ``engine``: ``cudaMemcpyPeerAsync`` (the copy engine; DIRECT's and NVSHMEM's path);
* ``write blocks=B unroll=U``: a kernel on the sender storing 16-byte cells into the
  peer's memory, ``B`` blocks of 256 threads (0: one thread per cell), each thread
  loading ``U`` cells before storing them;
* ``read ...``: the same kernel run on the receiver, loading from the sender.

Usage: ``python3 bench/probes/remote_write.py [--gib 2] [--reps 5]``
"""

from __future__ import annotations

import argparse

import cupy as cp

SOURCE = r"""
struct __align__(16) e16 { unsigned long long a, b; };
template <int U>
__device__ void body(const e16* __restrict__ s, e16* __restrict__ d, long long n) {
    const long long step = (long long)gridDim.x * blockDim.x * U;
    for (long long i = (long long)blockIdx.x * blockDim.x * U + threadIdx.x; i < n; i += step) {
        e16 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long j = i + (long long)u * blockDim.x;
            if (j < n) v[u] = s[j];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long j = i + (long long)u * blockDim.x;
            if (j < n) d[j] = v[u];
        }
    }
}
extern "C" __global__ void copy1(const e16* s, e16* d, long long n) { body<1>(s, d, n); }
extern "C" __global__ void copy2(const e16* s, e16* d, long long n) { body<2>(s, d, n); }
extern "C" __global__ void copy4(const e16* s, e16* d, long long n) { body<4>(s, d, n); }
extern "C" __global__ void copy8(const e16* s, e16* d, long long n) { body<8>(s, d, n); }
"""


def main() -> None:
    """Run the probe and print one line per configuration."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    nbytes = int(a.gib * 2**30) // 16 * 16
    n = nbytes // 16
    bufs, kern, streams = [], [], []
    for g in (0, 1):
        with cp.cuda.Device(g):
            for p in (0, 1):
                if p != g:
                    cp.cuda.runtime.deviceEnablePeerAccess(p)
            bufs.append((cp.ones(nbytes, dtype=cp.uint8), cp.zeros(nbytes, dtype=cp.uint8)))
            mod = cp.RawModule(code=SOURCE, options=("--std=c++17",))
            kern.append({u: mod.get_function(f"copy{u}") for u in (1, 2, 4, 8)})
            streams.append(cp.cuda.Stream(non_blocking=True))
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]

    def timed(launch_list) -> float:
        """Median seconds of the launches run together (each on its GPU's stream)."""
        times = []
        for _ in range(a.reps + 1):
            evs = []
            for g, fn in launch_list:
                with cp.cuda.Device(g):
                    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                    e0.record(streams[g])
                    fn()
                    e1.record(streams[g])
                    evs.append((g, e0, e1))
            worst = 0.0
            for g, e0, e1 in evs:
                with cp.cuda.Device(g):
                    e1.synchronize()
                    worst = max(worst, cp.cuda.get_elapsed_time(e0, e1) / 1e3)
            times.append(worst)
        times = sorted(times[1:])
        return times[len(times) // 2]

    def engine(frm: int, to: int):
        def go() -> None:
            cp.cuda.runtime.memcpyPeerAsync(
                bufs[to][1].data.ptr,
                to,
                bufs[frm][0].data.ptr,
                frm,
                nbytes,
                streams[frm].ptr,
            )

        return frm, go

    def kernel(on: int, src: int, dst: int, blocks: int, unroll: int):
        b = blocks if blocks else (n + 256 * unroll - 1) // (256 * unroll)

        def go() -> None:
            with cp.cuda.Device(on):
                kern[on][unroll](
                    (b,),
                    (256,),
                    (bufs[src][0], bufs[dst][1], cp.int64(n)),
                    stream=streams[on],
                )

        return on, go

    print(f"# {a.gib} GiB per direction, {sms} SMs, medians of {a.reps}")
    rows = [("engine", [engine(0, 1)]), ("engine bidir", [engine(0, 1), engine(1, 0)])]
    for blocks in (0, sms, 2 * sms, 4 * sms, 8 * sms):
        for unroll in (1, 2, 4, 8):
            tag = f"blocks={blocks} unroll={unroll}"
            rows.append((f"write {tag}", [kernel(0, 0, 1, blocks, unroll)]))
            rows.append(
                (
                    f"write bidir {tag}",
                    [kernel(0, 0, 1, blocks, unroll), kernel(1, 1, 0, blocks, unroll)],
                )
            )
            rows.append((f"read {tag}", [kernel(1, 0, 1, blocks, unroll)]))
    for name, launches in rows:
        t = timed(launches)
        print(f"{name:40s} {nbytes / t / 1e9:8.1f} GB/s per direction ({t * 1e3:.3f} ms)")


if __name__ == "__main__":
    main()
