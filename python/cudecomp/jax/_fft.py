"""Distributed FFTs of a ``cudecomp.fft.FFT`` plan as JAX operations.

The plan's schedule (``forward_stages``: the same data the eager plan runs) is followed
step by step: each transpose is the transpose primitive on the plan's spectral grid,
each local stage ``jax.numpy.fft`` along the axes the pencil holds whole. The stages run
unnormalised and the plan's norm is applied once at the end, as the eager plan does.
Being made of differentiable, batchable parts, the whole transform is: its derivative is
itself, its linear transpose the inverse with the norm's factor, and ``vmap`` moves the
mapped fields through each transpose in one exchange.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._errors import InvalidUsageError, NotSupportedError
from ..fft import FFT
from ..fft._local import _norm_scale
from ..fft._stages import Stage, backward_stages, forward_stages
from ._transpose import AXES, transpose

#: (from pencil, to pencil) -> the transpose primitive's direction.
_DIRECTION = {axes: d for d, axes in AXES.items()}


def check_plan(plan: Any, name: str) -> None:
    """Raise ``TypeError`` unless ``plan`` is a ``cudecomp.fft.FFT``."""
    if not isinstance(plan, FFT):
        raise TypeError(f"{name}: plan: expected a cudecomp.fft.FFT, got {type(plan).__name__}")


def _checked(plan: Any, x: Any, kinds: tuple[str, ...], name: str, inverse: bool) -> None:
    """Check the plan and ``x`` when traced."""
    check_plan(plan, name)
    if plan.kind not in kinds:
        raise InvalidUsageError(f"{name}: expected a plan of kind {' or '.join(kinds)}, got a {plan.kind} plan")
    if any(t != "fft" for t in plan.transforms):
        raise NotSupportedError(f"{name}: cosine and sine transforms ({'/'.join(plan.transforms)}) are not JAX operations yet")
    info, dtype = (plan.output_info, plan.output_dtype) if inverse else (plan.input_info, plan.input_dtype)
    pencil = tuple(info.array_shape)
    shape = tuple(getattr(x, "shape", ()))
    if not hasattr(x, "dtype"):
        raise TypeError(f"{name}: expected a JAX array, got {type(x).__name__}")
    if shape != pencil and not (len(shape) == 4 and shape[1:] == pencil and shape[0] >= 1):
        raise InvalidUsageError(
            f"{name}: expected shape {pencil} (this rank's pencil) or (k, *{pencil}) (a batch of k fields), got {shape}"
        )
    if np.dtype(x.dtype) != dtype:
        raise TypeError(f"{name}: expected dtype {dtype} for this {plan.kind} plan, got {np.dtype(x.dtype)}")


def _local(plan: Any, x: Any, st: Stage, inverse: bool) -> Any:
    """Local stage ``st`` of ``x`` (unnormalised): an FFT along the global axes it names."""
    import jax.numpy as jnp

    order = plan._pencil_order(st.pencil)
    first = x.ndim - 3  # a batch's leading axes
    npax = {g: first + 2 - order.index(g) for g in st.axes}
    halved = plan.kind == "r2c" and 0 in st.axes
    # The halved X last, as rfftn and irfftn take it.
    axes = [npax[g] for g in sorted(st.axes, key=lambda g: npax[g]) if not (halved and g == 0)] + ([npax[0]] if halved else [])
    if not inverse:
        return jnp.fft.rfftn(x, axes=axes, norm="backward") if halved else jnp.fft.fftn(x, axes=axes, norm="backward")
    if halved:
        lengths = [plan.gdims[order[first + 2 - ax]] for ax in axes]
        return jnp.fft.irfftn(x, s=lengths, axes=axes, norm="forward")
    return jnp.fft.ifftn(x, axes=axes, norm="forward")


def run(plan: Any, x: Any, inverse: bool, kinds: tuple[str, ...], name: str) -> Any:
    """Run ``plan``'s forward (``inverse``: backward) schedule on ``x`` with JAX operations."""
    import jax.numpy as jnp

    _checked(plan, x, kinds, name, inverse)
    x = jnp.asarray(x)
    grid = plan.spectral_grid
    stages = backward_stages if inverse else forward_stages
    for st in stages(plan.schedule, plan.transposed_out):
        if st.local:
            x = _local(plan, x, st, inverse)
        else:
            assert st.to is not None
            x = transpose(grid, x, _DIRECTION[(st.pencil, st.to)], name)
    scale = _norm_scale(plan.norm, inverse, math.prod(plan.gdims))
    return x if scale == 1.0 else x * jnp.asarray(scale, dtype=jnp.finfo(x.dtype).dtype)
