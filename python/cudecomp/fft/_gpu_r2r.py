"""Cosine and sine transforms of CuPy arrays: ``scipy.fft``'s definitions and norms on cuFFT, on the current stream.

Types 2 and 3 of real arrays run in ``_gpu_dct``: one real FFT between two fused kernels,
over all the axes of one family (type-II or type-III transforms) at once. Types 1 and 4
are computed here from one cuFFT transform each: DCT-I and DST-I as the real FFT of the
even (odd) extension of length ``2 (N - 1)`` (``2 (N + 1)``), DCT-IV and DST-IV as the
complex FFT of length ``2 N`` of the pre-twiddled data, then a post-twiddle. Complex
arrays transform their real and imaginary parts as one real array with a trailing axis of two.
"""

from __future__ import annotations

import math
from typing import Any

from ._gpu_dct import dct23, family


def r2r_axes(a: Any, transforms: tuple[tuple[int, str], ...], inverse: bool, norm: str, out: Any = None) -> Any:
    """Apply the transforms ``(axis, kind)`` of ``transforms`` to ``a`` (inverted: ``inverse``), into ``out`` where given.

    Axes of one family (``_gpu_dct.family``) go in one fused transform each; types 1 and
    4 one axis at a time. Returns ``out`` or a new C-contiguous array.
    """
    import cupy

    if a.dtype.kind == "c":
        # The real and imaginary parts as a trailing axis of two, transformed in one pass.
        x = cupy.ascontiguousarray(a)
        real = x.real.dtype
        pairs = x.view(real).reshape(*x.shape, 2)
        whole = out is not None and out.flags.c_contiguous
        r = r2r_axes(pairs, transforms, inverse, norm, out.view(real).reshape(*out.shape, 2) if whole else None)
        if whole:
            return out
        res = r.reshape(*x.shape[:-1], 2 * x.shape[-1]).view(a.dtype)
        if out is None:
            return res
        out[...] = res
        return out
    groups: dict[int | None, list[tuple[int, str]]] = {}
    for axis, kind in transforms:
        groups.setdefault(family(kind, inverse), []).append((axis, kind))
    todo: list[tuple[int | None, list[tuple[int, str]]]] = [(f, g) for f, g in groups.items() if f is not None]
    todo += [(None, [t]) for t in groups.get(None, [])]
    x = cupy.ascontiguousarray(a)
    for k, (fam, group) in enumerate(todo):
        target = out if k == len(todo) - 1 else None
        if fam is None:
            ((axis, kind),) = group
            x = r2r(x, axis, kind, inverse, norm)
            if target is not None:
                target[...] = x
                x = target
        else:
            x = dct23(x, tuple(g for g, _ in group), tuple(kd for _, kd in group), inverse, norm, target)
    return x


def r2r(a: Any, axis: int, kind: str, inverse: bool, norm: str) -> Any:
    """``scipy.fft.dct``/``dst`` (``idct``/``idst``: ``inverse``) of type ``kind[3]`` along ``axis``: a new C-contiguous array."""
    import cupy

    t = int(kind[3])
    if a.dtype.kind == "c":
        re = r2r(cupy.ascontiguousarray(a.real), axis, kind, inverse, norm)
        im = r2r(cupy.ascontiguousarray(a.imag), axis, kind, inverse, norm)
        return cupy.ascontiguousarray(re + 1j * im)
    if t in (2, 3):
        return dct23(cupy.ascontiguousarray(a), (axis,), (kind,), inverse, norm)
    x = cupy.moveaxis(a, axis, -1)
    n = x.shape[-1]
    big_n = 2 * (n - 1) if kind == "dct1" else 2 * (n + 1) if kind == "dst1" else 2 * n
    if norm == "ortho":
        factor = 1.0 / math.sqrt(big_n)
    elif (norm == "backward") == inverse:
        factor = 1.0 / big_n
    else:
        factor = 1.0
    ortho = norm == "ortho"
    if kind == "dct1":
        x = x.copy()
        if ortho:
            x[..., 0] *= math.sqrt(2)
            x[..., -1] *= math.sqrt(2)
        ext = cupy.concatenate([x, x[..., -2:0:-1]], axis=-1)
        y = cupy.fft.rfft(ext, axis=-1).real[..., :n]
        if ortho:
            y[..., 0] /= math.sqrt(2)
            y[..., -1] /= math.sqrt(2)
    elif kind == "dst1":
        zero = cupy.zeros((*x.shape[:-1], 1), x.dtype)
        ext = cupy.concatenate([zero, x, zero, -x[..., ::-1]], axis=-1)
        y = -cupy.fft.rfft(ext, axis=-1).imag[..., 1 : n + 1]
    else:
        j = cupy.arange(n, dtype=x.dtype)
        pre = cupy.exp(-1j * math.pi * (2 * j + 1) / (4 * n))
        v = cupy.zeros((*x.shape[:-1], 2 * n), pre.dtype if x.dtype == cupy.float64 else cupy.complex64)
        v[..., :n] = x * pre
        w = cupy.fft.fft(v, axis=-1)[..., :n] * cupy.exp(-1j * math.pi * j / (2 * n))
        y = 2 * (w.real if kind == "dct4" else -w.imag)
    y = (y * factor).astype(a.dtype, copy=False)
    return cupy.ascontiguousarray(cupy.moveaxis(y, -1, axis))
