"""The global transposes as one JAX primitive: its shapes, lowering and transformations.

The primitive ``cudecomp_transpose`` moves one pencil, or a batch of pencils along a
leading axis, between two pencils of a grid, through the core's handler
``cudecomp_transpose`` (an XLA FFI custom call). It is linear: its derivative is itself,
its linear transpose is the transpose the other way (each cell goes back where it came
from), and ``vmap`` folds the mapped axis into the batch, so that every field of the
batch moves in one exchange.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .. import _cudecomp
from .._cudecomp import GridDesc
from .._errors import InvalidUsageError
from . import _targets
from ._linear import linear_primitive

#: Direction -> (from pencil, to pencil), in the core's numbering.
AXES = {0: (0, 1), 1: (1, 2), 2: (2, 1), 3: (1, 0), 4: (0, 2), 5: (2, 0)}
#: Direction of the transpose that undoes each one.
INVERSE = {0: 3, 3: 0, 1: 2, 2: 1, 4: 5, 5: 4}
DTYPES = tuple(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128"))


@functools.cache
def primitive() -> Any:
    """Return the transpose primitive (defined on first use: JAX is imported then)."""
    return linear_primitive(
        "cudecomp_transpose",
        lambda q: {"grid": np.int64(q["grid"]), "direction": np.int64(q["direction"])},
        lambda q, in_shape: {**q, "direction": INVERSE[q["direction"]], "out_shape": in_shape},
    )


def transpose(grid: GridDesc, x: Any, direction: int, name: str) -> Any:
    """Check ``x`` against ``grid``'s pencils at trace time and bind the primitive."""
    import jax

    if not isinstance(grid, GridDesc):
        raise TypeError(f"{name}: grid: expected a cudecomp.GridDesc, got {type(grid).__name__}")
    grid_id = _cudecomp._xla_grid_id(grid)
    a, b = AXES[direction]
    src = tuple(grid.get_pencil_info(a).array_shape)
    dst = tuple(grid.get_pencil_info(b).array_shape)
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(f"{name}: expected a JAX array, got {type(x).__name__}")
    shape = tuple(x.shape)
    if shape != src and not (len(shape) == 4 and shape[1:] == src):
        raise InvalidUsageError(f"{name}: expected shape {src} (this rank's pencil) or (k, *{src}) (a batch of k fields), got {shape}")
    if np.dtype(x.dtype) not in DTYPES:
        raise TypeError(f"{name}: expected float32, float64, complex64 or complex128 data, got {np.dtype(x.dtype)}")
    if len(shape) == 4 and shape[0] < 1:
        raise InvalidUsageError(f"{name}: a batch holds at least 1 field, got shape {shape}")
    x = jax.numpy.asarray(x)
    return primitive().bind(x, grid=grid_id, direction=direction, out_shape=dst, ordered=_targets.ordered_for(grid.handle))
