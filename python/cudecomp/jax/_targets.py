"""The XLA FFI handlers of the package's core, registered with JAX once per process."""

from __future__ import annotations

import threading
from typing import Any

from .. import _cudecomp
from .._cudecomp import CPU_ONLY

_lock = threading.Lock()
_registered = False

#: The XLA platform the handlers serve: the CPU variant's host path, the GPU variant's CUDA streams.
PLATFORM = "cpu" if CPU_ONLY else "CUDA"


def register() -> None:
    """Register every handler of the core with JAX (idempotent)."""
    global _registered
    import jax

    with _lock:
        if _registered:
            return
        for name, address in _cudecomp._xla_targets().items():
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(address), platform=PLATFORM)
        _registered = True


_effect: Any = None


def ordered() -> Any:
    """Return the effect that orders every cudecomp call of a program on a handle of several ranks (JAX threads a token through them).

    Collectives must run in the same order on every rank; without an order XLA could run
    two independent calls of one grid in either order, or at once.
    """
    global _effect
    if _effect is None:
        _effect = _new_effect("CudecompOrdered", "The ranks' common order of cudecomp's collective calls.", ordered=True)
        _pass_tokens_as_they_are(_effect)
    return _effect


def _new_effect(name: str, doc: str, *, ordered: bool) -> Any:
    """Return an effect of a new type ``name``, allowed in lowering, control flow, custom derivatives and remat.

    ``ordered``: the type is one of JAX's ordered effects too.
    """
    from jax._src import effects

    kind = type(name, (effects.Effect,), {"__doc__": doc})
    sets = [
        effects.lowerable_effects,
        effects.control_flow_allowed_effects,
        effects.custom_derivatives_allowed_effects,
        effects.remat_allowed_effects,
    ]
    if ordered:
        sets += [effects.ordered_effects, effects.shardable_ordered_effects]
    for allowed in sets:
        allowed.add_type(kind)
    return kind()


_companion: Any = None


def call_effects(is_ordered: bool) -> set[Any]:
    """Return the JAX effects of one cudecomp call: none unordered (a handle of one rank), else the ordered effect and its companion.

    The companion, an unordered effect, keeps a program compiled ahead of time
    (``jax.jit(f).lower(x).compile()``) on JAX's Python dispatch, which hands the
    program its ordered token. JAX gives such a program its C++ dispatch wherever it has
    ordered effects alone, and that passes no token: the compiled program's second call
    failed ("Execution supplied 1 arguments but compiled program expected 2"). Programs
    of ``jax.jit`` take the Python dispatch already, so they are not changed by it.
    """
    global _companion
    if not is_ordered:
        return set()
    if _companion is None:
        doc = "A cudecomp call's program hands its token on through JAX's Python dispatch."
        _companion = _new_effect("CudecompDispatched", doc, ordered=False)
    return {ordered(), _companion}


def _pass_tokens_as_they_are(effect: Any) -> None:
    """Give each program of ``effect`` the token the last one returned, unmoved, where both run on the process's one device.

    Before every call of a program with an ordered effect JAX places the effect's last
    token on the program's devices again (``device_put``, for programs whose devices
    changed order). On the GPU that waited for the program that made the token: the host
    dispatched each jitted cudecomp program only once the last one had finished, so a
    jitted call took the eager call's time and a whole call's latency besides. A process
    has one device here (the handle refuses more), where the token is already in place;
    the order is the token's as before, carried by XLA from one program to the next.
    Other effects, and the first token, take JAX's path.
    """
    from jax._src import core, dispatch

    cls = dispatch.RuntimeTokenSet
    jax_way = getattr(cls, "get_token_input", None)
    if jax_way is None:
        return

    def get_token_input(self: Any, eff: Any, devices: Any, *rest: Any, **kw: Any) -> Any:
        if eff is effect and len(devices) == 1:
            token = self.current_tokens.get(eff)
            if isinstance(token, core.Token) and token._buf.devices() == {devices[0]}:
                return token
        return jax_way(self, eff, devices, *rest, **kw)

    cls.get_token_input = get_token_input  # type: ignore[method-assign]


def ordered_for(handle: Any) -> bool:
    """Whether the calls on ``handle`` take the ordered effect: where it has several ranks.

    A handle of one rank meets no other rank: its calls need no common order, only their
    data's, and go without the effect's runtime token and slower dispatch.
    """
    return int(handle.nranks) > 1


def lower_local(ctx: Any, target: str, operands: list[Any], *, in_place: bool = False, **attrs: Any) -> list[Any]:
    """Lower a call of handler ``target`` on a handle of one rank: no token, ordered by its data alone.

    ``in_place`` as for ``lower_ordered``.
    """
    import jax

    aliases = {0: 0} if in_place else None
    return list(jax.ffi.ffi_lowering(target, operand_output_aliases=aliases)(ctx, *operands, **attrs))


def lower_ordered(ctx: Any, target: str, operands: list[Any], *, in_place: bool = False, **attrs: Any) -> list[Any]:
    """Lower a call of handler ``target``: the program's cudecomp token in and out, then the operands and results.

    ``in_place``: the first result is the first operand's buffer (XLA copies the operand
    first where the program still needs it).
    """
    import jax
    from jax._src import core
    from jax._src.interpreters import mlir

    effect = ordered()
    token = ctx.tokens_in.get(effect)
    inner = ctx.replace(avals_in=[core.abstract_token, *ctx.avals_in], avals_out=[core.abstract_token, *ctx.avals_out])
    aliases = {1: 1} if in_place else None
    lowering = jax.ffi.ffi_lowering(target, has_side_effect=True, operand_output_aliases=aliases)
    out_token, *results = lowering(inner, token, *operands, **attrs)
    ctx.set_tokens_out(mlir.TokenSet({effect: out_token}))
    return results


def reset_after_failure() -> None:
    """Forget the failed run of a compiled program, so that the next cudecomp program can run.

    JAX hands the ordered token of each program to the next one; when a cudecomp call
    fails inside a compiled program on the GPU (a grid destroyed since it was compiled,
    say), the token it leaves holds the failure, and every later program with cudecomp
    calls fails with the same error (jax-ml/jax#37587). This drops that token, and any
    device's last output token that holds a failure, so that the next program starts a
    fresh order. The ranks' order is not lost: a failed program ran no further on any
    rank that saw its failure, and every rank calls this at the same point.
    """
    from jax._src import dispatch

    tokens = dispatch.runtime_tokens
    tokens.current_tokens.pop(ordered(), None)
    for device, token in list(tokens.output_runtime_tokens.items()):
        try:
            token.block_until_ready()
        except Exception:  # noqa: BLE001 - the failure this drops was raised already
            del tokens.output_runtime_tokens[device]
