"""Halo updates as one JAX primitive: its shapes, lowering and transformations.

The primitive ``cudecomp_update_halos`` runs the core's halo update along one global
dimension on a pencil with halos (or a batch of them), in place on XLA's buffer. It is
linear, so its derivative is itself. Its linear transpose is the halo *accumulation*:
each halo cell's cotangent is added to the owned cell it was copied from, on the rank
that owns it, and the halo cells that the update overwrote get none. That accumulation
is the update itself run on a rearranged cotangent: the update moves each face sent to
one side into the neighbour's halo on the other side; placing this rank's halo
cotangents where its sent faces are, the update delivers each to the neighbour that
owns its source cells, in the halo on the side it came from. Halo cells the update
leaves alone (at a non-periodic boundary, the padding) keep their cotangent.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np

from .. import _cudecomp
from .._cudecomp import GridDesc
from .._errors import InvalidUsageError
from . import _targets
from ._linear import Params, linear_primitive
from ._transpose import DTYPES


class Faces(NamedTuple):
    """Where one rank's faces along the updated dimension sit in its array (one field)."""

    #: The array axis of the updated dimension.
    axis: int
    #: Halo cells along it.
    halo: int
    #: Owned cells along it.
    owned: int
    #: Whether a neighbour fills the lower and the upper halo.
    filled: tuple[bool, bool]
    #: The faces' extent along each array axis (halos included, padding not).
    extent: tuple[int, int, int]


def _attrs(q: Params) -> Params:
    out = {"grid": np.int64(q["grid"]), "axis": np.int64(q["axis"]), "dim": np.int64(q["dim"])}
    for key, values in (("halo", q["halo"]), ("period", q["periods"]), ("padding", q["padding"])):
        out.update({f"{key}_{a}": np.int64(v) for a, v in zip("xyz", values, strict=True)})
    return out


def _along(f: Faces, lo: int, hi: int, ndim: int) -> tuple[Any, ...]:
    """Index of cells ``lo..hi`` along the updated axis, the faces' extent along the others."""
    index: list[Any] = [slice(0, e) for e in f.extent]
    index[f.axis] = slice(lo, hi)
    return (Ellipsis, *index) if ndim > 3 else tuple(index)


def _accumulate(p: Any, ct: Any, params: Params) -> Any:
    """Return the cotangent of a halo update's operand: the halo cotangents of ``ct`` added into their source cells."""
    import jax.numpy as jnp

    f: Faces = params["faces"]
    h, n, nd = f.halo, f.owned, ct.ndim
    recv = (_along(f, 0, h, nd), _along(f, h + n, 2 * h + n, nd))
    send = (_along(f, h, 2 * h, nd), _along(f, n, n + h, nd))
    out = jnp.asarray(ct)
    for side in (0, 1):
        if f.filled[side]:
            out = out.at[recv[side]].set(0)
    # The cotangent of the lower halo goes where the face sent down sits (it arrives in
    # the lower neighbour's upper halo), and the upper halo's where the face sent up sits;
    # where those faces overlap (fewer than 2 * halo owned cells), in two updates.
    sides = [(0, 1)] if n >= 2 * h else [(0,), (1,)]
    for group in sides:
        w = jnp.zeros_like(ct)
        for side in group:
            w = w.at[send[side]].set(ct[recv[side]])
        moved = p.bind(w, **params)
        for side in group:
            # The lower halo's cotangent lands in the lower neighbour's upper halo.
            out = out.at[send[1 - side]].add(moved[recv[1 - side]])
    return out


@functools.cache
def primitive() -> Any:
    """Return the halo-update primitive (defined on first use: JAX is imported then)."""
    return linear_primitive("cudecomp_update_halos", _attrs, adjoint=_accumulate, in_place=True)


def _triple(value: Any, what: str, name: str, kind: type) -> tuple[Any, ...]:
    try:
        items = tuple(value)
    except TypeError:
        items = ()
    if len(items) != 3 or not all(isinstance(v, (int, np.integer, bool, np.bool_)) for v in items):
        raise InvalidUsageError(f"{name}: {what}: expected 3 {kind.__name__}s (X, Y, Z), got {value!r}")
    out = tuple(kind(v) for v in items)
    if kind is int and min(out) < 0:
        raise InvalidUsageError(f"{name}: {what}: expected 3 non-negative ints (X, Y, Z), got {value!r}")
    return out


def _faces(grid: GridDesc, axis: int, dim: int, halo: tuple[int, ...], periods: tuple[bool, ...], padding: tuple[int, ...]) -> Faces:
    info = grid.get_pencil_info(axis, halo, padding)
    gdims = tuple(grid.config.gdims)
    pos = list(info.order).index(dim)
    lo, hi = info.lo[pos], info.hi[pos]
    extent = [0, 0, 0]
    for k, g in enumerate(info.order):
        extent[2 - k] = info.hi[k] - info.lo[k] + 1 + 2 * halo[g]
    filled = (periods[dim] or lo > 0, periods[dim] or hi < gdims[dim] - 1)
    return Faces(2 - pos, halo[dim], hi - lo + 1, filled, (extent[0], extent[1], extent[2]))


def update_halos(grid: GridDesc, x: Any, axis: int, halo_extents: Any, halo_periods: Any, dim: Any, padding: Any, name: str) -> Any:
    """Check the arguments against ``grid``'s ``axis`` pencil at trace time and bind the primitive."""
    import jax

    if not isinstance(grid, GridDesc):
        raise TypeError(f"{name}: grid: expected a cudecomp.GridDesc, got {type(grid).__name__}")
    grid_id = _cudecomp._xla_grid_id(grid)
    halo = _triple(halo_extents, "halo_extents", name, int)
    periods = _triple(halo_periods, "halo_periods", name, bool)
    pad = _triple((0, 0, 0) if padding is None else padding, "padding", name, int)
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool) or not 0 <= dim <= 2:
        raise InvalidUsageError(f"{name}: dim: expected 0, 1 or 2, got {dim!r}")
    dim = int(dim)
    shape_1 = tuple(grid.get_pencil_info(axis, halo, pad).array_shape)
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(f"{name}: expected a JAX array, got {type(x).__name__}")
    shape = tuple(x.shape)
    if shape != shape_1 and not (len(shape) == 4 and shape[1:] == shape_1 and shape[0] >= 1):
        raise InvalidUsageError(
            f"{name}: expected shape {shape_1} (this rank's pencil with halo_extents {halo} and padding {pad}) "
            f"or (k, *{shape_1}) (a batch of k fields), got {shape}"
        )
    if np.dtype(x.dtype) not in DTYPES:
        raise TypeError(f"{name}: expected float32, float64, complex64 or complex128 data, got {np.dtype(x.dtype)}")
    x = jax.numpy.asarray(x)
    if halo[dim] == 0:
        return x
    faces = _faces(grid, axis, dim, halo, periods, pad)
    params = {
        "grid": grid_id,
        "axis": axis,
        "dim": dim,
        "halo": halo,
        "periods": periods,
        "padding": pad,
        "faces": faces,
        "ordered": _targets.ordered_for(grid.handle),
    }
    return primitive().bind(x, out_shape=shape_1, **params)
