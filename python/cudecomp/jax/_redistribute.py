"""A redistribution as a JAX primitive, and the pair of core redistributions it runs.

The primitive ``cudecomp_redistribute`` moves this rank's source array (or a batch) into
its destination array through the core's handler. It is linear; its linear transpose is
the redistribution the other way (cells outside an owned box, halos and padding, get a
zero cotangent: the forward run never reads them), so ``Redistribution`` makes both
directions when it is created.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .. import _cudecomp
from .._cudecomp import Handle
from .._errors import InvalidUsageError
from . import _targets
from ._linear import linear_primitive
from ._sharded import sharded_between
from ._transpose import DTYPES


@functools.cache
def primitive() -> Any:
    """Return the redistribution primitive (defined on first use)."""
    return linear_primitive(
        "cudecomp_redistribute",
        lambda q: {"redistribution": np.int64(q["forward"])},
        lambda q, in_shape: {**q, "forward": q["back"], "back": q["forward"], "out_shape": in_shape},
    )


class Redistribution:
    """A redistribution between two decompositions, as a JAX operation (collective to create and destroy).

    Makes ``handle.create_redistribution(src, dst)`` and the one from ``dst`` to ``src``
    (the linear transpose that reverse-mode differentiation runs). ``run(x)`` is usable
    inside ``jax.jit``, differentiable and batched by ``vmap``.

    Args:
        handle: The library handle.
        src: The layout the data is in (``GridDesc.pencil(...)`` or this rank's ``BoxLayout``).
        dst: The layout it is moved to.
        backend: As for ``Handle.create_redistribution``.
    """

    def __init__(self, handle: Handle, src: Any, dst: Any, backend: Any = None) -> None:
        if not isinstance(handle, Handle):
            raise TypeError(f"handle: expected a cudecomp.Handle, got {type(handle).__name__}")
        self._ordered = _targets.ordered_for(handle)
        self._handle, self._sides = handle, (src, dst)
        self._forward = handle.create_redistribution(src, dst, backend=backend)
        try:
            self._back = handle.create_redistribution(dst, src, backend=backend)
        except BaseException:
            self._forward.destroy()
            raise

    @property
    def input_info(self) -> Any:
        """Describe the source array of this rank (``PencilInfo``)."""
        return self._forward.input_info

    @property
    def output_info(self) -> Any:
        """Describe the destination array of this rank (``PencilInfo``)."""
        return self._forward.output_info

    def run(self, x: Any, *, mesh: Any = None, out_mesh: Any = None) -> Any:
        """Return this rank's destination array holding the source array ``x`` (one array, or a batch ``(k, *array_shape)``).

        Cells of the result outside its owned box (halos, padding) are zero.

        With ``mesh`` (under ``jax.distributed``; both sides pencils of grids, made by
        ``GridDesc.pencil``), ``x`` is the global array of the source pencil sharded as
        ``pencil_spec(src.axis)`` over ``mesh`` (``pencil_mesh(src.grid)``), and the
        result the global array of the destination pencil sharded as
        ``pencil_spec(dst.axis)`` over ``out_mesh`` (``pencil_mesh(dst.grid)``; by
        default ``mesh``, for grids of one process grid): each process's shard is its
        array. The process grids' column counts must divide one another (``2x2`` and
        ``4x1``, ``2x1`` and ``1x2``).

        Raises:
            TypeError: ``x`` is no array, or of a dtype other than float32, float64,
                complex64, complex128 (when traced).
            InvalidUsageError: ``x`` of another shape than the source array, or a
                destroyed redistribution (when traced); with ``mesh``, on every rank, a
                mesh that is not its grid's.
            NotSupportedError: with ``mesh``, on every rank: a side that is a
                ``BoxLayout``, process grids whose column counts do not divide one
                another, or a grid whose pencils are not the shards of one global array.
        """
        if mesh is not None:
            meshes = (mesh, mesh if out_mesh is None else out_mesh)
            return sharded_between(self._handle, self._sides, meshes, x, self.run, "Redistribution.run")
        if out_mesh is not None:
            raise InvalidUsageError("Redistribution.run: out_mesh given without mesh (the source's pencil_mesh)")
        import jax.numpy as jnp

        forward = _cudecomp._xla_redistribution_id(self._forward)
        back = _cudecomp._xla_redistribution_id(self._back)
        src_shape = tuple(self._forward.input_info.array_shape)
        dst_shape = tuple(self._forward.output_info.array_shape)
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"run: expected a JAX array, got {type(x).__name__}")
        shape = tuple(x.shape)
        if shape != src_shape and not (len(shape) == 4 and shape[1:] == src_shape and shape[0] >= 1):
            raise InvalidUsageError(
                f"run: expected shape {src_shape} (this rank's source array) or (k, *{src_shape}) (a batch of k fields), got {shape}"
            )
        if np.dtype(x.dtype) not in DTYPES:
            raise TypeError(f"run: expected float32, float64, complex64 or complex128 data, got {np.dtype(x.dtype)}")
        return primitive().bind(jnp.asarray(x), forward=forward, back=back, out_shape=dst_shape, ordered=self._ordered)

    def destroy(self) -> None:
        """Destroy both directions (collective); later use raises ``InvalidUsageError``."""
        try:
            self._forward.destroy()
        finally:
            self._back.destroy()

    def __enter__(self) -> Redistribution:
        """Use it in a ``with`` block; leaving it destroys it."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Destroy both directions (collective)."""
        self.destroy()
