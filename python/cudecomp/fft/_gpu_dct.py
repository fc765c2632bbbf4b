"""Cosine and sine transforms of types 2 and 3 over several axes at once: one real FFT with fused pre- and post-kernels.

A DCT-II of length ``N`` is the real FFT of the input reordered (even-indexed elements
ascending, then odd-indexed ones descending), each output ``k`` combining the spectrum
at ``k`` and ``N - k`` with the twiddle ``exp(-i pi k / 2N)`` (Makhoul's algorithm).
The combination is linear and acts along one axis, so over ``d`` axes at once it is
one ``d``-dimensional real FFT between two kernels: the pre-kernel reorders the input
(one read, one write per element), and the post-kernel reads, for each output ``k``,
the ``2**(d-1)`` spectral values at the mirror points ``(±k1, ±k2, k3)`` and writes the
``2**d`` outputs at ``(k or N - k, ...)`` that need those same values, so each value
is read once; the norm's factors are applied there. The DCT-III (the inverse) runs
the same steps transposed: the pre-kernel builds the half spectrum from the inputs at
``j`` and ``N - j`` of each axis, a ``d``-dimensional complex-to-real FFT follows, and the
post-kernel undoes the reordering. The sine transforms are the cosine ones of the
input with alternating signs, read backwards (DST-II(x)[k] = DCT-II((-1)^n x)[N-1-k],
DST-III(X)[n] = (-1)^n DCT-III(X[N-1-j])[n]), which the kernels fold into their
indexing. Kernels are generated per shape, axes, kinds and norm, with every extent a
constant, and cached.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

_BLOCK = 256


def family(kind: str, inverse: bool) -> int | None:
    """Return 2 when ``kind`` (inverted: ``inverse``) computes a type-II transform, 3 for type III, None otherwise."""
    t = int(kind[3])
    if t not in (2, 3):
        return None
    return 2 if (t == 2) != inverse else 3


def _weights(n: int, sine: bool, fam: int, inverse: bool, norm: str) -> tuple[int, float, float]:
    """Return ``(special, a, b)``: the norm's factor along one axis is ``a`` at index ``special`` and ``b`` elsewhere.

    A type-II transform scales its outputs, a type-III one its inputs (the orthonormal
    transforms' factors differ at the zero frequency: the first cosine, the last sine).
    """
    special = n - 1 if sine else 0
    if norm == "ortho":
        if fam == 2:
            return special, math.sqrt(1.0 / (4 * n)), math.sqrt(1.0 / (2 * n))
        return special, math.sqrt(1.0 / n), math.sqrt(1.0 / (2 * n))
    f = 1.0 / (2 * n) if (norm == "backward") == inverse else 1.0
    return special, f, f


def _lit(v: float) -> str:
    """Return ``v`` as a double literal with every digit."""
    return repr(float(v))


class _Source:
    """The four kernels of one shape, axes and kinds (``pre2``/``post2`` for type II, ``pre3``/``post3`` for type III)."""

    def __init__(
        self,
        shape: tuple[int, ...],
        axes: tuple[int, ...],
        sine: tuple[bool, ...],
        weights: tuple[tuple[int, float, float], ...],
        double: bool,
    ):
        self.shape, self.axes, self.sine, self.weights = shape, axes, sine, weights
        self.real = "double" if double else "float"
        nd = len(shape)
        self.strides = [math.prod(shape[g + 1 :]) for g in range(nd)]
        h = axes[-1]
        spec = list(shape)
        spec[h] = shape[h] // 2 + 1
        self.spec_strides = [math.prod(spec[g + 1 :]) for g in range(nd)]
        # The reduced space: each transformed axis over [0, N / 2], the others whole.
        self.reduced = [shape[g] // 2 + 1 if g in axes else shape[g] for g in range(nd)]

    def _decode(self, extents: Sequence[int], name: str) -> list[str]:
        """Lines decoding the thread's linear index into ``name<g>`` over ``extents`` (C order)."""
        lines = ["long long r_ = i_;"]
        for g in reversed(range(len(extents))):
            lines.append(f"const long long {name}{g} = r_ % {extents[g]}LL; r_ /= {extents[g]}LL;")
        return lines

    def _perm(self, g: int, m: str) -> str:
        """Return the input index of the reordered element ``m`` along axis ``g``."""
        n = self.shape[g]
        return f"({m} < {(n + 1) // 2}LL ? 2 * {m} : {2 * n - 1}LL - 2 * {m})"

    def _weight(self, p: int, idx: str) -> str:
        special, a, b = self.weights[p]
        if a == b:
            return _lit(a)
        return f"({idx} == {special}LL ? {_lit(a)} : {_lit(b)})"

    def _twiddle(self, p: int, k: str) -> list[str]:
        """Lines setting ``w`` to exp(-i pi k / 2N) of transformed axis ``p``, in double precision."""
        n = self.shape[self.axes[p]]
        return [f"{{ double s_, c_; sincospi((double){k} / {2 * n}.0, &s_, &c_); w = cx{{(real)c_, (real)-s_}}; }}"]

    def text(self) -> str:
        """Return the CUDA C source of the four kernels."""
        nd, axes, d = len(self.shape), self.axes, len(self.axes)
        total, red_total = math.prod(self.shape), math.prod(self.reduced)
        pos = {g: p for p, g in enumerate(axes)}
        out: list[str] = [
            f"typedef {self.real} real;",
            "struct cx { real x, y; };",
            "__device__ inline cx cmul(cx a, cx b) { return cx{a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x}; }",
            "__device__ inline cx cconj(cx a) { return cx{a.x, -a.y}; }",
            "__device__ inline cx cadd(cx a, cx b) { return cx{a.x + b.x, a.y + b.y}; }",
            "__device__ inline cx csub(cx a, cx b) { return cx{a.x - b.x, a.y - b.y}; }",
            "__device__ inline cx cmuli(cx a) { return cx{-a.y, a.x}; }",
        ]

        def head(name: str, args: str, n: int) -> list[str]:
            return [
                f'extern "C" __global__ void {name}({args}) {{',
                "const long long i_ = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
                f"if (i_ >= {n}LL) return;",
            ]

        def elementwise(name: str, args: str, body_sign_read: str) -> list[str]:
            # pre2 and post3: one thread per element, the reordering along the transformed axes.
            lines = head(name, args, total) + self._decode(self.shape, "m")
            idx, sign = [], []
            for g in range(nd):
                if g in pos:
                    lines.append(f"const long long n{g} = {self._perm(g, f'm{g}')};")
                    if self.sine[pos[g]]:
                        sign.append(f"(n{g} & 1)")
                else:
                    lines.append(f"const long long n{g} = m{g};")
                idx.append(f"n{g} * {self.strides[g]}LL")
            flip = " ^ ".join(sign) if sign else "0"
            lines.append(f"const long long j_ = {' + '.join(idx)};")
            lines.append(f"const real sgn = ({flip}) ? (real)-1 : (real)1;")
            lines.append(body_sign_read)
            lines.append("}")
            return lines

        out += elementwise("pre2", "const real* __restrict__ x, real* __restrict__ v", "v[i_] = sgn * x[j_];")
        out += elementwise("post3", "const real* __restrict__ v, real* __restrict__ y", "y[j_] = sgn * v[i_];")

        def spec_index(bits: int, k: str) -> str:
            terms = []
            for g in range(nd):
                if g in pos and g != axes[-1] and bits >> pos[g] & 1:
                    terms.append(f"(({k}{g} == 0) ? 0 : {self.shape[g]}LL - {k}{g}) * {self.spec_strides[g]}LL")
                else:
                    terms.append(f"{k}{g} * {self.spec_strides[g]}LL")
            return " + ".join(terms)

        def mirror_ok(bits: int, k: str) -> str:
            conds = [f"({k}{g} != 0 && 2 * {k}{g} != {self.shape[g]}LL)" for g in axes if bits >> pos[g] & 1]
            return " && ".join(conds) if conds else "true"

        # post2: the spectrum's 2**(d-1) mirror values in, 2**d outputs out.
        n_q = 1 << d
        hb = 1 << (d - 1)
        lines = head("post2", "const cx* __restrict__ V, real* __restrict__ y", red_total) + self._decode(self.reduced, "k")
        lines.append(f"cx q[{n_q}]; cx w;")
        for b in range(hb):
            lines.append(f"q[{b}] = V[{spec_index(b, 'k')}];")
        for b in range(hb):
            lines.append(f"q[{b | hb}] = cconj(q[{(~b) & (hb - 1)}]);")
        for p, g in enumerate(axes):
            lines += self._twiddle(p, f"k{g}")
            for b in range(n_q):
                if not b >> p & 1:
                    c = b | 1 << p
                    lines.append(
                        f"{{ cx A = cmul(w, q[{b}]), B = cmul(cconj(w), q[{c}]); q[{b}] = cadd(A, B); q[{c}] = cmuli(csub(A, B)); }}"
                    )
        for b in range(n_q):
            idx, wts = [], []
            for g in range(nd):
                if g in pos:
                    n = self.shape[g]
                    o = f"({n}LL - k{g})" if b >> pos[g] & 1 else f"k{g}"
                    if self.sine[pos[g]]:
                        o = f"({n - 1}LL - {o})"
                    idx.append(f"{o} * {self.strides[g]}LL")
                    wts.append(self._weight(pos[g], o))
                else:
                    idx.append(f"k{g} * {self.strides[g]}LL")
            lines.append(f"if ({mirror_ok(b, 'k')}) y[{' + '.join(idx)}] = (real)((double)q[{b}].x * {' * '.join(wts)});")
        lines.append("}")
        out += lines

        # pre3: the 2**d inputs at (j or N - j, ...) in, the 2**(d-1) half-spectrum values out.
        lines = head("pre3", "const real* __restrict__ X, cx* __restrict__ Z", red_total) + self._decode(self.reduced, "j")
        lines.append(f"cx q[{n_q}]; cx w;")
        for b in range(n_q):
            idx, wts, zero = [], [], []
            for g in range(nd):
                if g in pos:
                    n = self.shape[g]
                    hi = b >> pos[g] & 1
                    o = f"({n}LL - j{g})" if hi else f"j{g}"
                    if hi:
                        zero.append(f"j{g} == 0")
                    if self.sine[pos[g]]:
                        o = f"({n - 1}LL - {o})"
                    idx.append(f"{o} * {self.strides[g]}LL")
                    wts.append(self._weight(pos[g], o))
                else:
                    idx.append(f"j{g} * {self.strides[g]}LL")
            read = f"(real)((double)X[{' + '.join(idx)}] * {' * '.join(wts)})"
            if zero:
                read = f"({' || '.join(zero)}) ? (real)0 : {read}"
            lines.append(f"q[{b}] = cx{{{read}, (real)0}};")
        for p, g in enumerate(axes):
            lines += self._twiddle(p, f"j{g}")
            for b in range(n_q):
                if not b >> p & 1:
                    c = b | 1 << p
                    lines.append(
                        f"{{ cx L = q[{b}], H = cmuli(q[{c}]); q[{b}] = cmul(cconj(w), csub(L, H)); q[{c}] = cmul(w, cadd(L, H)); }}"
                    )
        for b in range(hb):
            lines.append(f"if ({mirror_ok(b, 'j')}) Z[{spec_index(b, 'j')}] = q[{b}];")
        lines.append("}")
        out += lines
        return "\n".join(out) + "\n"


@functools.lru_cache(maxsize=64)
def _module(
    shape: tuple[int, ...], axes: tuple[int, ...], sine: tuple[bool, ...], weights: tuple[tuple[int, float, float], ...], double: bool
) -> Any:
    import cupy

    return cupy.RawModule(code=_Source(shape, axes, sine, weights, double).text(), options=("--std=c++14",))


def _launch(kernel: Any, n: int, *args: Any) -> None:
    kernel(((n + _BLOCK - 1) // _BLOCK,), (_BLOCK,), args)


def dct23(a: Any, axes: tuple[int, ...], kinds: tuple[str, ...], inverse: bool, norm: str, out: Any = None) -> Any:
    """Transform the real C-contiguous CuPy ``a`` along ``axes`` by ``kinds`` (types 2 and 3, one family: see ``family``).

    Returns ``out`` (C-contiguous, ``a``'s dtype and shape) or a new array, on CuPy's
    current stream.
    """
    import cupy
    import cupyx.scipy.fft as cf

    order = sorted(range(len(axes)), key=lambda p: axes[p])
    axes = tuple(axes[p] for p in order)
    kinds = tuple(kinds[p] for p in order)
    fams = {family(k, inverse) for k in kinds}
    fam = fams.pop() if len(fams) == 1 else None
    if fam is None:
        raise ValueError(f"dct23: kinds {kinds} are not of one family of types 2 and 3")
    shape = tuple(int(v) for v in a.shape)
    sine = tuple(k.startswith("dst") for k in kinds)
    weights = tuple(_weights(shape[g], s, fam, inverse, norm) for g, s in zip(axes, sine, strict=True))
    mod = _module(shape, axes, sine, weights, a.dtype == np.float64)
    y = out if out is not None else cupy.empty(shape, a.dtype)
    total = math.prod(shape)
    reduced = math.prod(shape[g] // 2 + 1 if g in axes else shape[g] for g in range(len(shape)))
    if fam == 2:
        v = cupy.empty(shape, a.dtype)
        _launch(mod.get_function("pre2"), total, a, v)
        # cuFFT transforms leading axes in Fortran order: the post-kernel reads C order.
        spec = cupy.ascontiguousarray(cf.rfftn(v, axes=axes, overwrite_x=True))
        del v
        _launch(mod.get_function("post2"), reduced, spec, y)
    else:
        spec_shape = list(shape)
        spec_shape[axes[-1]] = shape[axes[-1]] // 2 + 1
        z = cupy.empty(tuple(spec_shape), np.complex128 if a.dtype == np.float64 else np.complex64)
        _launch(mod.get_function("pre3"), reduced, a, z)
        v = cf.irfftn(z, s=tuple(shape[g] for g in axes), axes=axes, norm="forward", overwrite_x=True)
        del z
        _launch(mod.get_function("post3"), total, cupy.ascontiguousarray(v), y)
    return y
