"""How every cudecomp primitive is defined: a linear map of one array (or a batch) to another.

Each primitive lowers to the core's handler of its name (under the ordered effect where
its handle has several ranks, whose calls must meet in one order), runs outside ``jit``
as its own cached program, has a linear transpose (its own kind of map
with the parameters of the map back, or a composition the primitive derives), and folds
``vmap``'s axis into the batch its handler moves in one exchange. Its parameters always
hold ``out_shape``, the result of one field, and ``ordered`` (``ordered_for``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from .._errors import InvalidUsageError
from . import _targets

Params = dict[str, Any]


def linear_primitive(
    name: str,
    attrs: Callable[[Params], Params],
    inverse: Callable[[Params, tuple[int, ...]], Params] | None = None,
    *,
    adjoint: Callable[[Any, Any, Params], Any] | None = None,
    in_place: bool = False,
) -> Any:
    """Define primitive ``name`` (and its rules) over the handler of the same name.

    ``attrs(params)``: the handler's attributes. The linear transpose is either
    ``inverse(params, in_shape)``, the parameters of this primitive's map back
    (``in_shape`` being one field of the operand), or ``adjoint(p, ct, params)``, the
    cotangent of the operand from ``ct`` (``p`` is this primitive). ``in_place``: the
    handler updates its operand, which XLA then gives as the result's buffer.
    """
    import jax
    from jax._src import dispatch
    from jax.extend.core import Primitive
    from jax.interpreters import ad, batching, mlir

    _targets.register()
    p = Primitive(name)

    def abstract(x: Any, **params: Any) -> Any:
        return jax.core.ShapedArray((*x.shape[:-3], *params["out_shape"]), x.dtype), _targets.call_effects(params["ordered"])

    p.def_effectful_abstract_eval(abstract)
    # Called outside jit, the primitive runs as its own compiled program (cached).
    p.def_impl(functools.partial(dispatch.apply_primitive, p))

    def lowering(ctx: Any, x: Any, **params: Any) -> Any:
        lower = _targets.lower_ordered if params["ordered"] else _targets.lower_local
        return lower(ctx, name, [x], in_place=in_place, **attrs(params))

    mlir.register_lowering(p, lowering, platform=_targets.PLATFORM.lower())
    other = "cuda" if _targets.PLATFORM == "cpu" else "cpu"

    def wrong_platform(ctx: Any, x: Any, **params: Any) -> Any:
        variant = "CPU" if _targets.PLATFORM == "cpu" else "GPU"
        raise InvalidUsageError(
            f"{name}: this is the {variant} variant of cudecomp, whose JAX operations run on JAX's "
            f"{_targets.PLATFORM} devices; got a program for {other} devices (put the arrays on a {_targets.PLATFORM} device)"
        )

    mlir.register_lowering(p, wrong_platform, platform=other)

    def transpose_rule(ct: Any, x: Any, **params: Any) -> list[Any]:
        if type(ct) is ad.Zero:
            return [ad.Zero(x.aval)]
        if adjoint is not None:
            return [adjoint(p, ct, params)]
        assert inverse is not None
        return [p.bind(ct, **inverse(params, tuple(x.aval.shape[-3:])))]

    ad.deflinear2(p, transpose_rule)

    def batch_rule(args: Any, dims: Any, **params: Any) -> Any:
        (x,), (d,) = args, dims
        x = jax.numpy.moveaxis(x, d, 0)
        lead = x.shape[:-3]
        flat = x.reshape((int(np.prod(lead)), *x.shape[-3:]))
        y = p.bind(flat, **params)
        return y.reshape((*lead, *params["out_shape"])), 0

    batching.primitive_batchers[p] = batch_rule
    return p
