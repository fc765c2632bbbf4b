"""The plan's index helpers: modes, wavenumbers, coordinates and eigenvalues of this rank's pencils.

Per axis they follow its transform: an FFT, or a cosine or sine transform on vertex or
cell-centred points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._cudecomp import PencilInfo
from .._errors import InvalidUsageError
from ._args import _lengths

#: Offset of coefficient m's wavenumber, pi (m + shift) / L, per cosine or sine type.
_SHIFT = {"dct1": 0.0, "dct2": 0.0, "dct3": 0.5, "dct4": 0.5, "dst1": 1.0, "dst2": 1.0, "dst3": 0.5, "dst4": 0.5}


def _spacing(transform: str, n: int, length: float) -> float:
    """Grid spacing of ``n`` points over a box of ``length`` on the grid of ``transform`` (vertex or cell-centred)."""
    if transform == "dct1":
        return length / max(n - 1, 1)
    if transform == "dst1":
        return length / (n + 1)
    return length / n


class _SpectralHelpers:
    """The index helpers of ``FFT`` (its ``_gdims``, ``_kind``, ``_transforms``, pencil infos and array module)."""

    _gdims: tuple[int, int, int]
    _kind: str
    _transforms: tuple[str, str, str]

    @property
    def output_info(self) -> PencilInfo:  # pragma: no cover - FFT's
        raise NotImplementedError

    @property
    def input_info(self) -> PencilInfo:  # pragma: no cover - FFT's
        raise NotImplementedError

    @property
    def _real_dtype(self) -> np.dtype:  # pragma: no cover - FFT's
        raise NotImplementedError

    def _xp(self) -> Any:  # pragma: no cover - FFT's
        raise NotImplementedError

    def _broadcast(self, info: PencilInfo, full: Sequence[np.ndarray], dtype: Any) -> tuple[Any, Any, Any]:
        """Per global axis, ``full[g]`` cut to this rank's range and shaped to broadcast against the pencil array."""
        xp = self._xp()
        out: list[Any] = [None, None, None]
        for p in range(3):
            g = info.order[p]
            shape = [1, 1, 1]
            k = 2 - p
            v = full[g][info.lo[p] : info.hi[p] + 1]
            shape[k] = v.size
            out[g] = xp.asarray(v.astype(dtype).reshape(shape))
        return out[0], out[1], out[2]

    def modes(self) -> tuple[Any, Any, Any]:
        """Integer mode numbers ``(mx, my, mz)`` of this rank's spectral pencil (``output_info``).

        Each is an ``int64`` array (NumPy or CuPy) of three axes with one of extent more
        than 1, so that they broadcast against a spectral array. Along a full FFT axis of
        ``N`` points the modes are ``numpy.fft.fftfreq(N, 1 / N)``: ``0, 1, ..., -1``,
        with ``-N // 2`` at the Nyquist index of an even ``N``. Along the halved X axis
        of ``r2c`` they are ``0 .. X // 2`` (``numpy.fft.rfftfreq(X, 1 / X)``). Along a
        cosine or sine axis they are the indices ``0 .. N - 1`` of its coefficients.
        """
        full = []
        for g in range(3):
            n, t = self._gdims[g], self._transforms[g]
            f: np.ndarray
            if t != "fft":
                f = np.arange(n, dtype=np.float64)
            elif g == 0 and self._kind == "r2c":
                f = np.fft.rfftfreq(n, 1.0 / n)
            else:
                f = np.fft.fftfreq(n, 1.0 / n)
            full.append(np.rint(f).astype(np.int64))
        return self._broadcast(self.output_info, full, np.int64)

    def wavenumbers(self, lengths: float | Sequence[float] = 2 * math.pi) -> tuple[Any, Any, Any]:
        """Angular wavenumbers ``(kx, ky, kz)`` of this rank's spectral pencil.

        Args:
            lengths: Box length ``L`` per global axis (X, Y, Z), or one for all three;
                the default ``2 pi`` gives ``k = m`` along FFT axes.

        Returns:
            Three real arrays (the plan's precision, NumPy or CuPy) broadcastable
            against a spectral array. Along an FFT axis ``2 pi m / L``, ``m`` as
            ``modes()``: ``2 * pi * numpy.fft.fftfreq(N, L / N)`` (``rfftfreq`` along the
            halved X axis of ``r2c``). Along a cosine or sine axis the wavenumber of
            coefficient ``m``'s basis function on ``coordinates()``: ``pi (m + s) / L``,
            ``s`` 0 for DCT-I and -II, 1 for DST-I and -II, 1/2 for the others.
        """
        ls = _lengths(lengths)
        mx, my, mz = self.modes()
        real = self._real_dtype
        out = []
        for g, (m, L) in enumerate(zip((mx, my, mz), ls, strict=True)):
            t = self._transforms[g]
            if t == "fft":
                out.append(m.astype(real) * real.type(2 * math.pi / L))
            else:
                out.append((m.astype(real) + real.type(_SHIFT[t])) * real.type(math.pi / L))
        return out[0], out[1], out[2]

    def eigenvalues(self, lengths: float | Sequence[float] = 2 * math.pi, operator: str = "spectral") -> tuple[Any, Any, Any]:
        """Eigenvalues of the second derivative along each axis, broadcastable against a spectral array.

        ``operator="spectral"``: ``-k**2`` (``k`` as ``wavenumbers(lengths)``);
        ``"fd2"``: those of the second-order central difference on the plan's grid points
        (``coordinates(lengths)``), ``-(2 - 2 cos(k h)) / h**2`` with ``h`` the spacing
        along the axis. Their sum is the Laplacian's eigenvalue of each spectral
        coefficient: cosine axes (DCT-I, -II) carry Neumann boundaries, sine axes
        (DST-I, -II) Dirichlet ones, FFT axes periodic ones (DCT-I and DST-I on vertex
        grids, the others on cell-centred ones; see ``coordinates``).
        """
        if operator not in ("spectral", "fd2"):
            raise InvalidUsageError(f"operator {operator!r}: expected 'spectral' or 'fd2'")
        ls = _lengths(lengths)
        ks = self.wavenumbers(ls)
        real = self._real_dtype
        out = []
        for g, k in enumerate(ks):
            if operator == "spectral":
                out.append(-(k * k))
                continue
            h = real.type(_spacing(self._transforms[g], self._gdims[g], ls[g]))
            out.append((self._xp().cos(k * h) - real.type(1)) * real.type(2) / (h * h))
        return out[0], out[1], out[2]

    def coordinates(self, lengths: float | Sequence[float] = 2 * math.pi) -> tuple[Any, Any, Any]:
        """Grid-point coordinates ``(x, y, z)`` of this rank's real-space pencil (``input_info``).

        Args:
            lengths: Box length per global axis (X, Y, Z), or one for all three. Point
                ``i`` of an FFT axis of ``N`` points lies at ``i * L / N`` (periodic); of
                a DCT-I axis at ``i * L / (N - 1)`` (vertices, both walls included); of a
                DST-I axis at ``(i + 1) * L / (N + 1)`` (vertices, walls excluded); of
                the other cosine and sine types at ``(i + 1/2) * L / N`` (cell centres).

        Returns:
            Three real arrays (the plan's precision, NumPy or CuPy) broadcastable
            against a real-space array.
        """
        ls = _lengths(lengths)
        real = self._real_dtype
        full = []
        for n, L, t in zip(self._gdims, ls, self._transforms, strict=True):
            h = _spacing(t, n, L)
            first = {"fft": 0.0, "dct1": 0.0, "dst1": h}.get(t, h / 2)
            full.append(first + np.arange(n) * h)
        return self._broadcast(self.input_info, full, real)
