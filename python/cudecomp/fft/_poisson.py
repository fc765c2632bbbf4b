"""A distributed Poisson / Helmholtz solver: ``lap(u) - lam * u = f`` on a box with walls.

Per axis the boundaries are periodic, Neumann or Dirichlet, and the transforms whose basis
functions meet them diagonalise the Laplacian.

Each axis's boundaries pick its transform (periodic: FFT; Neumann: DCT-II on cell
centres, DCT-I on vertices; Dirichlet: DST-II on cell centres, DST-I on interior
vertices); one ``FFT`` plan of those transforms diagonalises the Laplacian, whose
eigenvalues are the plan's (``FFT.eigenvalues``): spectral (``-k**2``) or those of the
second-order central difference, the projection step of finite-volume and
finite-difference codes. A solve is a forward transform, a division, a backward
transform: the plan's own schedule, with its spectral data left where the forward ends.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import numpy as np

from .._collective import collective
from .._cudecomp import Handle
from .._enums import TransposeCommBackend
from .._errors import InvalidUsageError
from ._args import _lengths, _name, _per_axis
from ._plan import FFT

BOUNDARIES = ("periodic", "neumann", "dirichlet")
"""The boundary conditions of an axis (the same at both of its ends)."""

_TRANSFORM = {
    ("periodic", "cell"): "fft",
    ("periodic", "vertex"): "fft",
    ("neumann", "cell"): "dct2",
    ("neumann", "vertex"): "dct1",
    ("dirichlet", "cell"): "dst2",
    ("dirichlet", "vertex"): "dst1",
}


def _boundaries(bc: Any) -> tuple[str, str, str]:
    """Return the boundary conditions per axis (X, Y, Z) from one name for all three, or three."""
    return _per_axis("bc", (bc, bc, bc) if isinstance(bc, str) else bc, BOUNDARIES, "boundary conditions")


class Poisson:
    """Solve ``lap(u) - lam * u = f`` on this rank's pencils (collective to create, solve and destroy).

    Args:
        handle: The library handle.
        gdims: Grid points ``(X, Y, Z)``: cell centres (``grid="cell"``), or vertices
            (``grid="vertex"``: with Neumann boundaries both walls included, with
            Dirichlet ones the interior points only, the walls' zero values excluded).
        pdims: The process grid, or ``None`` to let the plan's autotuner choose.
        bc: Per axis (X, Y, Z), or one for all: ``"periodic"``, ``"neumann"`` (zero normal
            derivative at both ends) or ``"dirichlet"`` (zero value at both ends).
        grid: ``"cell"`` (the points are the centres of ``N`` cells, the walls on cell
            faces; the finite-volume arrangement) or ``"vertex"`` (the points are the
            vertices of a uniform grid). Periodic axes are the same either way.
        operator: ``"spectral"`` (the exact Laplacian of the transforms' basis: spectral
            accuracy for smooth solutions) or ``"fd2"`` (the second-order central
            difference ``(u[i-1] - 2 u[i] + u[i+1]) / h**2`` with the boundary's ghost
            values: what a second-order projection step solves).
        lengths: The box's lengths (X, Y, Z), or one for all.
        lam: ``lam >= 0``: the Helmholtz term (0: Poisson).
        dtype: ``float32`` or ``float64``.
        mean: What a non-zero mean of ``f`` does where the problem has a null space:
            ``"warn"``, ``"raise"`` or ``"ignore"`` (see below).
        backend: As for ``FFT``.
        config: As for ``FFT``.
        fft_library: As for ``FFT``.
        workers: As for ``FFT``.
        comm: As for ``FFT`` (also the communicator of the mean's check).

    The null space: with ``lam == 0`` and no Dirichlet axis, constants solve the
    homogeneous problem and ``f`` must have a zero mean. The solver returns the
    zero-mean solution; where ``f``'s mean is not zero (beyond rounding) it warns
    (``RuntimeWarning``, on the rank holding the mean's coefficient), or raises with
    ``mean="raise"`` (on every rank), or says nothing with ``mean="ignore"``.

    Raises:
        InvalidUsageError: Unknown boundary, grid or operator names, a negative ``lam``,
            and what ``FFT`` refuses, on every rank.
    """

    def __init__(
        self,
        handle: Handle,
        gdims: Sequence[int],
        pdims: Sequence[int] | None = None,
        *,
        bc: str | Sequence[str] = "periodic",
        grid: str = "cell",
        operator: str = "spectral",
        lengths: float | Sequence[float] = 2 * math.pi,
        lam: float = 0.0,
        dtype: Any = np.float64,
        mean: str = "warn",
        backend: TransposeCommBackend | Sequence[TransposeCommBackend] | None = None,
        config: Any = None,
        fft_library: str = "auto",
        workers: int | None = None,
        comm: Any = None,
    ) -> None:
        with collective(handle, "cudecomp.fft.Poisson") as call:
            b = _boundaries(bc)
            g = _name("grid", grid, ("cell", "vertex"))
            op = _name("operator", operator, ("spectral", "fd2"))
            self._mean = _name("mean", mean, ("warn", "raise", "ignore"))
            ls = _lengths(lengths)
            if isinstance(lam, bool) or not isinstance(lam, int | float | np.floating | np.integer) or not math.isfinite(lam) or lam < 0:
                raise InvalidUsageError(f"lam: expected a finite number >= 0, got {lam!r}")
            call.agree(bc=b, grid=g, operator=op, lengths=ls, lam=float(lam), mean=self._mean)
        transforms = tuple(_TRANSFORM[(bi, g)] for bi in b)
        self.plan = FFT(
            handle,
            gdims,
            pdims,
            kind="r2c" if transforms[0] == "fft" else "r2r",
            transforms=transforms,
            dtype=dtype,
            transposed_out=True,
            backend=backend,
            config=config,
            fft_library=fft_library,
            workers=workers,
            comm=comm,
        )
        """The transform plan the solver runs (its ``grid`` holds ``f`` and ``u``)."""
        try:
            ex, ey, ez = self.plan.eigenvalues(ls, op)
            denominator = ex + ey + ez - self.plan._real_dtype.type(lam)
            self._singular = float(lam) == 0.0 and "dirichlet" not in b
            xp = self.plan._xp()
            zero = denominator == 0
            self._inverse = xp.where(zero, 0, 1 / xp.where(zero, 1, denominator)).astype(self.plan._real_dtype)
            self._mean_here = bool(self._singular and to_bool(zero.any()))
        except BaseException:
            self.plan.destroy()
            raise
        self.bc, self.grid_kind, self.operator, self.lengths, self.lam = b, g, op, tuple(ls), float(lam)

    def solve(self, f: Any, out: Any = None, *, axis: int = 0, stream: Any = None) -> Any:
        """Return ``u`` with ``lap(u) - lam * u = f`` (collective).

        Args:
            f: This rank's ``axis``-pencil of the plan's grid (``plan.grid``), shape
                ``plan.grid.get_pencil_info(axis).array_shape``, of the solver's dtype. Not
                modified (unless ``out`` is ``f``).
            out: The array for ``u`` (the same shape and dtype; ``f`` itself solves in
                place), or ``None`` to allocate one.
            axis: The pencil (0, 1, 2) ``f`` and ``u`` are in: other pencils than X move
                through the grid's transposes.
            stream: GPU variant: the stream, as for ``FFT.forward``.

        Returns:
            ``out``, or the new array.
        """
        if axis not in (0, 1, 2) or isinstance(axis, bool):
            raise InvalidUsageError(f"axis: expected 0 (X), 1 (Y) or 2 (Z), got {axis!r}")
        p, g = self.plan, self.plan.grid
        names = "xyz"
        x = f if axis == 0 else getattr(g, f"transpose_{names[axis]}_to_x")(f, stream=stream)
        spec = p.forward(x, stream=stream)
        if self._singular and self._mean != "ignore":
            self._check_mean(spec)
        spec *= self._inverse
        if axis == 0:
            return p.backward(spec, out, stream=stream)
        u = p.backward(spec, stream=stream)
        return getattr(g, f"transpose_x_to_{names[axis]}")(u, out, stream=stream)

    def _check_mean(self, spec: Any) -> None:
        """Check the null space: ``f``'s mean (its zero mode's coefficient) must vanish (see the class).

        Collective: the largest coefficient over all ranks sets the scale the mean's is
        compared with, on the rank that holds it.
        """
        scale = self.plan._allreduce_max(to_float(abs(spec).max()) if spec.size else 0.0)
        with collective(self.plan._handle, "cudecomp.fft.Poisson.solve: the mean of f"):
            if not self._mean_here:
                return
            zero = to_float(abs(spec[self._inverse == 0]).max())
            tol = 1e-5 if self.plan.input_dtype == np.float32 else 1e-10
            if zero > tol * max(scale, 1e-300):
                message = (
                    f"f has a non-zero mean (its mean coefficient is {zero:.3g}, the largest {scale:.3g}); with lam = 0 and no "
                    "Dirichlet axis the problem has no solution for it: the zero-mean solution of f minus its mean is returned"
                )
                if self._mean == "raise":
                    raise InvalidUsageError(message)
                warnings.warn(message, RuntimeWarning, stacklevel=4)

    def destroy(self) -> None:
        """Destroy the plan (collective)."""
        self.plan.destroy()

    def __enter__(self) -> Poisson:
        """Use the solver in a ``with`` block; leaving it destroys it."""
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        """Destroy the plan (collective)."""
        self.plan.__exit__(exc_type, exc, tb)


def to_float(v: Any) -> float:
    """Return a NumPy or CuPy scalar as a Python float."""
    return float(v.item() if hasattr(v, "item") else v)


def to_bool(v: Any) -> bool:
    """Return a NumPy or CuPy boolean as a Python bool."""
    return bool(v.item() if hasattr(v, "item") else v)
