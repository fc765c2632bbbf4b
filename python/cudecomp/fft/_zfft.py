"""A GPU FFT along the slowest axis of an array whose other axes are contiguous, with a scale fused.

The X-fastest Z-pencil of the streamed slab-xy schedule transforms along Z with a stride
of a whole plane between consecutive elements. cuFFT's strided plan takes 6.3 ms for the
8 GiB of complex128 of one rank's half of 1024^3 on an H200 (a copy: 4.0 ms), and cannot
fuse the norm's scale without JIT callbacks, which the cuFFT of CUDA 13.0 rejects, so a
scaled transform costs a second pass (10.2 ms in all; bench/RESULTS.md). This kernel
reads and writes the array once, scale included (6.5-7.0 ms in place, 5.7-5.9 out of
place or in slabs of rows): a block takes a few
neighbouring columns (one element of every Z plane each), so every load and store of a
warp covers 128-byte stretches of rows, and transforms them as ``N = R * S`` (the
four-step split): ``S`` threads per column each do an ``R``-point DFT in registers over
elements ``S`` apart, multiply by the twiddles, exchange through shared memory, then
``R`` threads per column do the ``S``-point DFTs and store in natural order, scaled. The
small DFTs are straight-line radix-2 code generated here with the constants written out;
the twiddles between the steps come from a table computed in double precision on the
host, so results match cuFFT's accuracy.

Rows of the input may be read from, and rows of the output written to, a second array
(``a_rows``, ``out_rows``): the streamed transforms' own cells stay in the Y-pencil, so
the exchange need not copy them into the Z-pencil (``own_cells=False``). Out of place,
with half the rows in the Y-pencil, it takes 6.3 ms there unscaled (cuFFT on the
Z-pencil alone: 5.9 ms, after a 2.7 ms copy of those rows). Lengths that are powers of
two from 16 to 1024 take this path (``supported``); others stay with cuFFT.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# Most elements per thread in registers (the larger of R and S).
_MAX_RADIX = 32


def supported(n: int, dtype: Any) -> bool:
    """Whether ``n``-point transforms of ``dtype`` (complex64 or complex128) run on this kernel."""
    return np.dtype(dtype) in (np.complex64, np.complex128) and 16 <= n <= _MAX_RADIX**2 and n & (n - 1) == 0


def _split(n: int) -> tuple[int, int]:
    """Return ``(R, S)`` with ``R * S == n`` and ``R`` the larger, both powers of two."""
    s = 1 << (int(math.log2(n)) // 2)
    return n // s, s


class _Shape:
    """How a kernel cuts its work: ``tx`` columns per block for ``n``-point DFTs."""

    def __init__(self, n: int, itemsize: int, tx: int) -> None:
        self.n, self.tx = n, tx
        self.r, self.s = _split(n)
        # The block's shared tile holds a row of R places per step-A row, padded by one
        # place per column where a warp's accesses would otherwise share banks.
        self.row = (self.r + (1 if tx * itemsize < 128 else 0)) * tx
        self.smem = self.s * self.row * itemsize
        self.block = (tx, max(self.r, self.s))

    def grid(self, ncols: int) -> tuple[int]:
        return ((ncols + self.tx - 1) // self.tx,)


def _lit(x: float, real: str) -> str:
    """Return a floating-point literal of type ``real`` that rounds to ``x``."""
    return f"{x!r}" if real == "double" else f"{x!r}f"


def _dft(r: int, v: str, sign: int, real: str) -> list[str]:
    """Straight-line code of an in-place radix-2 decimation-in-frequency DFT of ``v[0..r)``.

    The result is left in bit-reversed order: ``v[bitrev(k)]`` holds output ``k``.
    Twiddles are ``exp(sign * 2 pi i m / r)``, written as literals; the trivial ones
    (1 and -+i) are applied without a multiplication.
    """
    lines: list[str] = []
    h = r // 2
    while h >= 1:
        for b in range(0, r, 2 * h):
            for i in range(h):
                p, q = f"{v}[{b + i}]", f"{v}[{b + i + h}]"
                lines.append(f"{{ C a = {p}, c = {q}; {p} = cadd(a, c); C d = csub(a, c);")
                m = i * (r // (2 * h))  # exponent in units of 1/r of a turn
                if m == 0:
                    lines.append(f"  {q} = d; }}")
                elif 4 * m == r:
                    # exp(sign * i pi / 2) = sign * i
                    lines.append(f"  {q} = {'mul_i' if sign > 0 else 'mul_mi'}(d); }}")
                else:
                    ang = sign * 2.0 * math.pi * m / r
                    c, s = _lit(math.cos(ang), real), _lit(math.sin(ang), real)
                    lines.append(f"  {q} = cmul(d, C{{{c}, {s}}}); }}")
        h //= 2
    return lines


def _bitrev(k: int, bits: int) -> int:
    return int(f"{k:0{bits}b}"[::-1], 2) if bits else 0


def _source(sh: _Shape, complex_type: str, real: str, sign: int) -> str:
    """CUDA source of the kernel of shape ``sh`` (``sign``: of the exponent)."""
    n, r, s, tx, row = sh.n, sh.r, sh.s, sh.tx, sh.row
    rb, sb = int(math.log2(r)), int(math.log2(s))
    step_a = "\n      ".join(_dft(r, "v", sign, real))
    step_b = "\n      ".join(_dft(s, "u", sign, real))
    # Step A: thread row t < S of a column holds elements t + S j (j < R); after its DFT,
    # v[bitrev(k1)] is Y[t, k1], which is multiplied by w_N^(t k1) and stored at row t,
    # place k1, of the tile.
    stores_a = "\n      ".join(f"sm[t * {row} + {k1 * tx} + c] = cmul(v[{_bitrev(k1, rb)}], tw[(t * {k1}) & {n - 1}]);" for k1 in range(r))
    loads_b = "\n      ".join(f"u[{t}] = sm[{t * row} + k1 * {tx} + c];" for t in range(s))
    stores_b = "\n        ".join(f"out_row(k1 + {r * k2})[col] = cscale(u[{_bitrev(k2, sb)}], scale);" for k2 in range(s))
    return f"""
typedef {complex_type} C;
typedef {real} Real;
__device__ __forceinline__ C cadd(C a, C b) {{ return C{{a.x + b.x, a.y + b.y}}; }}
__device__ __forceinline__ C csub(C a, C b) {{ return C{{a.x - b.x, a.y - b.y}}; }}
__device__ __forceinline__ C cmul(C a, C b) {{ return C{{a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x}}; }}
__device__ __forceinline__ C mul_i(C a) {{ return C{{-a.y, a.x}}; }}
__device__ __forceinline__ C mul_mi(C a) {{ return C{{a.y, -a.x}}; }}
__device__ __forceinline__ C cscale(C a, Real f) {{ return C{{a.x * f, a.y * f}}; }}

extern "C" __global__ void __launch_bounds__({sh.block[0] * sh.block[1]})
zfft(const C* in, long long ld_in, const C* in_alt, long long ld_in_alt, int in_lo, int in_hi,
     C* out, long long ld_out, C* out_alt, long long ld_out_alt, int out_lo, int out_hi,
     long long ncols, const C* __restrict__ tw, Real scale)
{{
    // Rows in_lo..in_hi of the input come from in_alt, rows out_lo..out_hi of the output
    // go to out_alt (no __restrict__: the input may be the output).
    auto in_row = [&](int z) -> const C* {{
        return z >= in_lo && z < in_hi ? in_alt + (long long)(z - in_lo) * ld_in_alt : in + (long long)z * ld_in; }};
    auto out_row = [&](int z) -> C* {{
        return z >= out_lo && z < out_hi ? out_alt + (long long)(z - out_lo) * ld_out_alt : out + (long long)z * ld_out; }};
    extern __shared__ C sm[];
    const int c = threadIdx.x;
    const long long col = (long long)blockIdx.x * {tx} + c;
    const bool live = col < ncols;
    if (threadIdx.y < {s}) {{
      const int t = threadIdx.y;
      C v[{r}];
      #pragma unroll
      for (int j = 0; j < {r}; ++j)
        v[j] = live ? in_row(t + {s} * j)[col] : C{{0, 0}};
      {step_a}
      {stores_a}
    }}
    __syncthreads();
    if (threadIdx.y < {r}) {{
      const int k1 = threadIdx.y;
      C u[{s}];
      {loads_b}
      {step_b}
      if (live) {{
        {stores_b}
      }}
    }}
}}
"""


class StridedFFT:
    """Compiled kernels (per length, precision and direction) and twiddle tables, made on first use.

    ``columns`` per block: by default 128 bytes of each row (8 complex128 or 16
    complex64). Narrower blocks read rows in stretches too short for the memory (64-byte
    stretches: 1.8 times a copy's time on an H200), and wider ones need more shared
    memory than a block has; two blocks of 8 columns sharing their tiles through
    distributed shared memory were measured slower (bench/RESULTS.md).
    """

    def __init__(self, columns: int | None = None) -> None:
        self._columns = columns
        self._kernels: dict[tuple[int, str, int], tuple[Any, Any, _Shape]] = {}

    def _kernel(self, n: int, dtype: np.dtype, sign: int) -> tuple[Any, Any, _Shape]:
        key = (n, dtype.str, sign)
        k = self._kernels.get(key)
        if k is None:
            import cupy

            double = dtype == np.complex128
            sh = _Shape(n, dtype.itemsize, self._columns or 128 // dtype.itemsize)
            src = _source(sh, "double2" if double else "float2", "double" if double else "float", sign)
            fn = cupy.RawModule(code=src, options=("--std=c++17",)).get_function("zfft")
            fn.max_dynamic_shared_size_bytes = sh.smem
            m = np.arange(n, dtype=np.float64)
            tw = cupy.asarray(np.exp(sign * 2j * np.pi * m / n).astype(dtype))
            k = self._kernels[key] = (fn, tw, sh)
        return k

    @staticmethod
    def takes(a: Any, out: Any, *alts: Any) -> bool:
        """Whether the kernel transforms ``a`` into ``out`` (rows of either may lie in ``alts``).

        It needs a supported length and dtype, the same shape for ``a`` and ``out``, the
        same dtype and the same extents past axis 0 for all, and the last two axes of each
        together one contiguous row.
        """

        def rows(x: Any) -> bool:
            item = x.dtype.itemsize
            return (
                x.ndim == 3
                and x.dtype == a.dtype
                and x.shape[1:] == a.shape[1:]
                and x.strides[2] == item
                and x.strides[1] == x.shape[2] * item
                and x.strides[0] > 0
            )

        return supported(a.shape[0], a.dtype) and out.shape == a.shape and all(rows(x) for x in (a, out, *alts))

    def __call__(
        self,
        a: Any,
        out: Any,
        inverse: bool,
        scale: float = 1.0,
        a_rows: tuple[int, Any] | None = None,
        out_rows: tuple[int, Any] | None = None,
    ) -> None:
        """Transform ``a`` along axis 0 into ``out`` (may be ``a``), times ``scale``, on the current stream.

        ``a_rows = (lo, alt)``: rows ``lo`` to ``lo + len(alt)`` of the input are read from
        ``alt`` instead of ``a``; ``out_rows``: those rows of the output are written to
        its array instead of ``out`` (the streamed FFTs' own cells, which stay in the
        other pencil). The caller checks ``takes(a, out, *alts)``.
        """
        ncols = a.shape[1] * a.shape[2]
        if ncols == 0:
            return
        fn, tw, sh = self._kernel(a.shape[0], a.dtype, 1 if inverse else -1)
        item = a.dtype.itemsize
        real = np.float64 if a.dtype == np.complex128 else np.float32

        def split(x: Any, rows: tuple[int, Any] | None) -> tuple[Any, ...]:
            lo, alt = rows if rows is not None else (0, x[:0])
            return (
                x,
                np.int64(x.strides[0] // item),
                alt if alt.size else x,
                np.int64(alt.strides[0] // item),
                np.int32(lo),
                np.int32(lo + alt.shape[0]),
            )

        args = (*split(a, a_rows), *split(out, out_rows), np.int64(ncols), tw, real(scale))
        fn(sh.grid(ncols), sh.block, args, shared_mem=sh.smem)
