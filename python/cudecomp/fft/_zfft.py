"""A GPU FFT along the slowest axis of an array whose other axes are contiguous, with a scale fused.

The X-fastest Z-pencil of the streamed slab-xy schedule transforms along Z with a stride
of a whole plane between consecutive elements. cuFFT's strided plan is well short of a
copy's speed there, and cannot fuse the norm's scale without JIT callbacks, which the
cuFFT of CUDA 13.0 rejects, so a scaled transform costs a second pass. This kernel
reads and writes the array once, scale included, near a copy's time (figures: the
benchmark record): a block takes a few
neighbouring columns (one element of every Z plane each), so every load and store of a
warp covers 128-byte stretches of rows, and transforms them as ``N = R * S`` (the
four-step split): ``S`` threads per column each do an ``R``-point DFT in registers over
elements ``S`` apart, multiply by the twiddles, exchange through shared memory, then
``R`` threads per column do the ``S``-point DFTs and store in natural order, scaled. The
small DFTs are straight-line mixed-radix code (radices 4, 2, 3, 5) generated here with
the constants written out; the twiddles between the steps come from a table computed in
double precision on the host, so results match cuFFT's accuracy.

Rows of the input may be read from, and rows of the output written to, a second array
(``a_rows``, ``out_rows``): the streamed transforms' own cells stay in the Y-pencil, so
the exchange need not copy them into the Z-pencil (``own_cells=False``), which saves
the copy of those rows that cuFFT on the Z-pencil alone would need. Lengths from 16 to 1024
made of factors 2, 3 and 5 that split into two factors of at most 32 take this path
(``supported``); others stay with cuFFT.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# Most elements per thread in registers (the larger of R and S).
_MAX_RADIX = 32


def _smooth(n: int) -> bool:
    """Whether ``n`` has no prime factor above 5 (the radices the DFTs are built from)."""
    for p in (2, 3, 5):
        while n % p == 0:
            n //= p
    return n == 1


def _split(n: int) -> tuple[int, int] | None:
    """Return the most balanced ``(R, S)`` with ``R * S == n``, ``S <= R <= 32``, or None."""
    best = None
    for s in range(1, _MAX_RADIX + 1):
        if n % s == 0 and s <= n // s <= _MAX_RADIX:
            best = (n // s, s)
    return best


def supported(n: int, dtype: Any) -> bool:
    """Whether ``n``-point transforms of ``dtype`` (complex64 or complex128) run on this kernel.

    Lengths from 16 to 1024 with no prime factor above 5 that split into two factors of at
    most 32 (all powers of two, and 48, 96, 384, 768, 960, ...; not 1000 = 25 x 40).
    """
    return np.dtype(dtype) in (np.complex64, np.complex128) and 16 <= n <= _MAX_RADIX**2 and _smooth(n) and _split(n) is not None


class _Shape:
    """How a kernel cuts its work: ``tx`` columns per block for ``n``-point DFTs."""

    def __init__(self, n: int, itemsize: int, tx: int) -> None:
        self.n, self.tx = n, tx
        rs = _split(n)
        if rs is None:
            raise ValueError(f"no split of {n} into two factors of at most {_MAX_RADIX}")
        self.r, self.s = rs
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


class _Codelet:
    """Straight-line code of small DFTs, written as a sequence of named temporaries.

    ``dft(names)`` returns the names holding the DFT of the values ``names`` in natural
    order: mixed-radix decimation in time (radix 4 first, then 2, 3 and 5), with the
    twiddles ``exp(sign * 2 pi i m / n)`` written out as literals and the trivial ones
    (1, -1, +-i) applied without a multiplication.
    """

    def __init__(self, sign: int, real: str) -> None:
        self.sign, self.real = sign, real
        self.lines: list[str] = []
        self.count = 0

    def let(self, expr: str) -> str:
        name = f"q{self.count}"
        self.count += 1
        self.lines.append(f"const C {name} = {expr};")
        return name

    def rotate(self, x: str, m: int, n: int) -> str:
        """``x`` times ``exp(sign * 2 pi i m / n)``."""
        m %= n
        if m == 0:
            return x
        if (4 * m) % n == 0:
            quarter = 4 * m // n  # 1, 2 or 3 quarter turns in the sign's direction
            if quarter == 2:
                return self.let(f"cneg({x})")
            return self.let(f"{'mul_i' if (quarter == 1) == (self.sign > 0) else 'mul_mi'}({x})")
        ang = self.sign * 2.0 * math.pi * m / n
        return self.let(f"cmul({x}, C{{{_lit(math.cos(ang), self.real)}, {_lit(math.sin(ang), self.real)}}})")

    def small(self, t: list[str]) -> list[str]:
        """Return the DFT of 2, 3, 4 or 5 values."""
        p = len(t)
        if p == 2:
            return [self.let(f"cadd({t[0]}, {t[1]})"), self.let(f"csub({t[0]}, {t[1]})")]
        if p == 4:
            s02, d02 = self.let(f"cadd({t[0]}, {t[2]})"), self.let(f"csub({t[0]}, {t[2]})")
            s13, d13 = self.let(f"cadd({t[1]}, {t[3]})"), self.rotate(self.let(f"csub({t[1]}, {t[3]})"), 1, 4)
            return [
                self.let(f"cadd({s02}, {s13})"),
                self.let(f"cadd({d02}, {d13})"),
                self.let(f"csub({s02}, {s13})"),
                self.let(f"csub({d02}, {d13})"),
            ]
        if p == 3:
            sb = self.let(f"cadd({t[1]}, {t[2]})")
            u = self.let(f"csub({t[0]}, cscale({sb}, {_lit(0.5, self.real)}))")
            h = _lit(self.sign * math.sqrt(3.0) / 2.0, self.real)
            v = self.let(f"cscale(mul_i(csub({t[1]}, {t[2]})), {h})")
            return [self.let(f"cadd({t[0]}, {sb})"), self.let(f"cadd({u}, {v})"), self.let(f"csub({u}, {v})")]
        out = []
        for q in range(p):
            acc = t[0]
            for r in range(1, p):
                acc = self.let(f"cadd({acc}, {self.rotate(t[r], r * q, p)})")
            out.append(acc)
        return out

    def dft(self, x: list[str]) -> list[str]:
        n = len(x)
        if n == 1:
            return list(x)
        p = next(f for f in (4, 2, 3, 5) if n % f == 0)
        m = n // p
        subs = [self.dft(x[r::p]) for r in range(p)]
        out = [""] * n
        for k in range(m):
            ys = self.small([self.rotate(subs[r][k], r * k, n) for r in range(p)])
            for q in range(p):
                out[k + m * q] = ys[q]
        return out


def _source(sh: _Shape, complex_type: str, real: str, sign: int) -> str:
    """CUDA source of the kernel of shape ``sh`` (``sign``: of the exponent)."""
    r, s, tx, row = sh.r, sh.s, sh.tx, sh.row
    a = _Codelet(sign, real)
    ya = a.dft([f"v[{j}]" for j in range(r)])
    b = _Codelet(sign, real)
    xb = b.dft([f"u[{t}]" for t in range(s)])
    step_a = "\n      ".join(a.lines)
    step_b = "\n      ".join(b.lines)
    # Step A: thread row t < S of a column holds elements t + S j (j < R); its DFT gives
    # Y[t, k1], which is multiplied by w_N^(t k1) (t k1 < N: no wrap) and stored at row
    # t, place k1, of the tile.
    stores_a = "\n      ".join(f"sm[t * {row} + {k1 * tx} + c] = cmul({ya[k1]}, tw[t * {k1}]);" for k1 in range(r))
    loads_b = "\n      ".join(f"u[{t}] = sm[{t * row} + k1 * {tx} + c];" for t in range(s))
    stores_b = "\n        ".join(f"out_row(k1 + {r * k2})[col] = cscale({xb[k2]}, scale);" for k2 in range(s))
    return f"""
typedef {complex_type} C;
typedef {real} Real;
__device__ __forceinline__ C cadd(C a, C b) {{ return C{{a.x + b.x, a.y + b.y}}; }}
__device__ __forceinline__ C csub(C a, C b) {{ return C{{a.x - b.x, a.y - b.y}}; }}
__device__ __forceinline__ C cmul(C a, C b) {{ return C{{a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x}}; }}
__device__ __forceinline__ C mul_i(C a) {{ return C{{-a.y, a.x}}; }}
__device__ __forceinline__ C mul_mi(C a) {{ return C{{a.y, -a.x}}; }}
__device__ __forceinline__ C cneg(C a) {{ return C{{-a.x, -a.y}}; }}
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
    stretches were measured far slower than a copy), and wider ones need more shared
    memory than a block has; two blocks of 8 columns sharing their tiles through
    distributed shared memory were measured slower. On GPUs with
    less shared memory per block (V100: 96 KiB) the columns are halved until the tile
    fits, and lengths whose tile fits nowhere stay with cuFFT (``takes``).
    """

    def __init__(self, columns: int | None = None) -> None:
        self._columns = columns
        self._kernels: dict[tuple[int, str, int], tuple[Any, Any, _Shape]] = {}
        self._smem_limit: int | None = None

    def _shape(self, n: int, dtype: np.dtype) -> _Shape | None:
        """Return the kernel's shape for ``n``-point transforms of ``dtype`` on this device, or None."""
        if self._smem_limit is None:
            import cupy

            # cudaDevAttrMaxSharedMemoryPerBlockOptin
            self._smem_limit = int(cupy.cuda.runtime.deviceGetAttribute(97, cupy.cuda.Device().id))
        tx = self._columns or 128 // dtype.itemsize
        while True:
            sh = _Shape(n, dtype.itemsize, tx)
            if sh.smem <= self._smem_limit:
                return sh
            if tx == 1:
                return None
            tx //= 2

    def _kernel(self, n: int, dtype: np.dtype, sign: int) -> tuple[Any, Any, _Shape]:
        key = (n, dtype.str, sign)
        k = self._kernels.get(key)
        if k is None:
            import cupy

            double = dtype == np.complex128
            sh = self._shape(n, dtype)
            if sh is None:
                raise ValueError(f"the {n}-point kernel's tile does not fit this GPU's shared memory")
            src = _source(sh, "double2" if double else "float2", "double" if double else "float", sign)
            fn = cupy.RawModule(code=src, options=("--std=c++17",)).get_function("zfft")
            fn.max_dynamic_shared_size_bytes = sh.smem
            m = np.arange(n, dtype=np.float64)
            tw = cupy.asarray(np.exp(sign * 2j * np.pi * m / n).astype(dtype))
            k = self._kernels[key] = (fn, tw, sh)
        return k

    def takes(self, a: Any, out: Any, *alts: Any) -> bool:
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

        return (
            supported(a.shape[0], a.dtype)
            and out.shape == a.shape
            and all(rows(x) for x in (a, out, *alts))
            and self._shape(a.shape[0], a.dtype) is not None
        )

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
