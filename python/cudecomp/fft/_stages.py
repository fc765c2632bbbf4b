"""A plan's schedule as data: the local transforms and transposes its forward runs.

``forward_stages(schedule, transposed_out)`` lists the steps once per plan; the backward
transform runs the same list in reverse, each local stage inverted and each transpose
taken the other way. Each local stage transforms some global axes of the pencil the
data is in; what each axis's transform is (an FFT, a cosine or sine transform) is the
plan's per-axis option, read by the stage (``_plan.FFT._local_stage``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._local import _into, _Local
from ._schedule import Schedule

_AXES = "xyz"


@dataclass(frozen=True)
class Stage:
    """One step of a forward transform.

    A local stage (``to is None``) transforms global ``axes`` (0 = X, 1 = Y, 2 = Z) of the
    data in ``pencil``; a transpose moves it from ``pencil`` to ``to``.
    """

    pencil: int
    axes: tuple[int, ...] = ()
    to: int | None = None

    @property
    def local(self) -> bool:
        """True for a local stage."""
        return self.to is None

    def reversed(self) -> Stage:
        """Return the step the backward transform takes in its place."""
        return self if self.to is None else Stage(self.to, (), self.pencil)

    def transpose_name(self) -> str:
        """Return the ``GridDesc`` method of a transpose (``transpose_x_to_y`` ...)."""
        assert self.to is not None
        return f"transpose_{_AXES[self.pencil]}_to_{_AXES[self.to]}"


def forward_stages(schedule: Schedule, transposed_out: bool) -> tuple[Stage, ...]:
    """Return the forward steps of ``schedule``: local stages along the axes each pencil holds whole.

    Pencils that hold the same data share one layout (X and Y under ``slab-xy``, Y and Z
    under ``slab-yz``), so a stage of one runs on the array of the other. Without
    ``transposed_out`` the spectral data returns to the X-pencil (the pencil schedule in
    one exchange, Z to X).
    """
    if schedule == "local":
        return (Stage(0, (0, 1, 2)),)
    if schedule == "slab-xy":
        steps = [Stage(0, (0, 1)), Stage(1, (), 2), Stage(2, (2,))]
        back = Stage(2, (), 1)
    elif schedule == "slab-yz":
        steps = [Stage(0, (0,)), Stage(0, (), 1), Stage(1, (1, 2))]
        back = Stage(1, (), 0)
    else:
        steps = [Stage(0, (0,)), Stage(0, (), 1), Stage(1, (1,)), Stage(1, (), 2), Stage(2, (2,))]
        back = Stage(2, (), 0)
    if not transposed_out:
        steps.append(back)
    return tuple(steps)


def backward_stages(schedule: Schedule, transposed_out: bool) -> tuple[Stage, ...]:
    """Return the backward steps: the forward ones reversed."""
    return tuple(s.reversed() for s in reversed(forward_stages(schedule, transposed_out)))


@dataclass(frozen=True)
class _Step:
    """One step of a transform as the plan runs it: the stage, whether it makes a new array (of ``dtype``) and delivers ``out``."""

    stage: Stage
    makes: bool
    dtype: np.dtype
    #: The local stage where a real plan's data turns complex (forward) or real (backward).
    turns: bool
    delivers: bool = False


def _as(xp: Any, y: Any, dtype: np.dtype, out: Any) -> Any:
    """``y`` as ``dtype`` (real data made complex), in ``out`` where given."""
    if out is not None:
        out[...] = y
        return out
    return xp.asarray(y, dtype=dtype)


def _real_part(xp: Any, y: Any, out: Any) -> Any:
    """Return the real part of ``y``, contiguous, in ``out`` where given."""
    if out is not None:
        out[...] = y.real
        return out
    return xp.ascontiguousarray(y.real)


class _ScheduleRunner:
    """How ``FFT`` runs its steps (its local library, grids, scratch and per-axis transforms)."""

    _local: _Local
    _kind: str
    _transforms: tuple[str, str, str]
    _gdims: tuple[int, int, int]
    _schedule: Schedule
    _transposed: bool
    _in_dtype: np.dtype
    _out_dtype: np.dtype
    _scratch: dict[tuple[int, str], Any]
    _steps: dict[bool, tuple[_Step, ...]]

    @property
    def grid(self) -> Any:  # pragma: no cover - FFT's
        raise NotImplementedError

    @property
    def spectral_grid(self) -> Any:  # pragma: no cover - FFT's
        raise NotImplementedError

    def _xp(self) -> Any:  # pragma: no cover - FFT's
        raise NotImplementedError

    def _finish(self, r: Any, out: Any, scale: float) -> Any:
        """Scale ``r`` (ours, or already ``out``) and deliver it in ``out`` when given.

        Scaling into ``out`` is one pass over memory (a scaled copy), not a copy and then
        an in-place scaling.
        """
        if scale == 1.0:
            return _into(r, out)
        if out is None or r is out:
            r *= scale
            return r
        return self._xp().multiply(r, scale, out=out)

    def _tmp(self, axis: int, dtype: np.dtype, fields: int | None) -> Any:
        """Scratch pencil ``axis`` of ``dtype`` (a batch of ``fields`` where given), kept by the plan (CPU variant); None on GPUs.

        Reusing it spares the page faults of fresh arrays on every call; on GPUs CuPy's
        memory pool already recycles memory (stream-ordered). Real pencils of an ``r2c``
        plan are the real grid's, every other one the spectral grid's. The plan keeps the
        scratch of the last batch size it ran, not of every one.
        """
        if self._local.gpu:
            return None
        key = (axis, dtype.str)
        buf = self._scratch.get(key)
        if buf is None or buf.ndim != (3 if fields is None else 4) or (fields is not None and buf.shape[0] != fields):
            grid = self.grid if (self._kind == "r2c" and dtype.kind == "f") else self.spectral_grid
            buf = grid.empty_pencil(axis, dtype, fields=fields)
            self._scratch[key] = buf
        return buf

    # -- the schedule --------------------------------------------------------------------

    def _plan_steps(self, inverse: bool) -> tuple[_Step, ...]:
        """List the steps of ``forward`` (``backward``: ``inverse``) on this plan's schedule, with what each makes.

        The data turns complex (forward) at the local stage of the first FFT axis of a
        real plan, and real again there (backward). A step makes a new array where it
        reads the caller's input (the first local stage), where it is a transpose, or
        where it turns the data's type; local stages otherwise work in place. The last
        step that makes an array makes the caller's ``out``.
        """
        stages = forward_stages(self._schedule, self._transposed)
        fft = [g for g in range(3) if self._transforms[g] == "fft"]
        turn = None
        if self._kind != "c2c" and fft:
            turn = next(i for i, s in enumerate(stages) if s.local and any(g in fft for g in s.axes))
        spectral = self._out_dtype
        base = self._in_dtype

        def after(i: int) -> np.dtype:  # the data's type after forward step i
            return spectral if turn is not None and i >= turn else base if turn is not None else spectral

        n = len(stages)
        steps = []
        for j in range(n):
            i = n - 1 - j if inverse else j
            stage = stages[i].reversed() if inverse else stages[i]
            dtype = (after(i - 1) if i > 0 else base) if inverse else after(i)
            makes = (not stage.local) or j == 0 or i == turn
            steps.append(_Step(stage, makes, dtype, i == turn))
        last = max(k for k, s in enumerate(steps) if s.makes)
        steps[last] = _Step(steps[last].stage, True, steps[last].dtype, steps[last].turns, True)
        return tuple(steps)

    def _run(self, a: Any, out: Any, s: int | None, inverse: bool, fields: int | None) -> Any:
        """Run the plan's steps on ``a`` (``backward``: ``inverse``), delivering into ``out`` where given.

        A batch (``fields``, a leading axis) runs the same steps: each local stage over the
        batch's arrays at once, each transpose as one exchange of all fields.
        """
        L, G = self._local, self.spectral_grid
        fft_points = math.prod(self._gdims[g] for g in range(3) if self._transforms[g] == "fft")
        scale = L.scale(inverse, fft_points) if "fft" in self._transforms else 1.0
        steps = self._steps[inverse]
        x, own = a, False
        for k, step in enumerate(steps):
            st = step.stage
            if step.delivers:
                # The caller's array; a backward that still scales delivers by the scaling.
                target = None if (inverse and scale != 1.0 and k == len(steps) - 1) else out
            else:
                target = self._tmp(st.pencil if st.local else st.to, step.dtype, fields) if step.makes else None  # type: ignore[arg-type]
            if st.local:
                x = self._local_stage(x, st, inverse, target, own, step.turns, fields is not None)
            else:
                x = getattr(G, st.transpose_name())(x, target, stream=s)
            own = True
        return self._finish(x, out, scale)

    def _local_stage(self, x: Any, st: Stage, inverse: bool, target: Any, own: bool, turns: bool, batched: bool) -> Any:
        """Transform the axes of local stage ``st`` of ``x`` (its inverse: ``inverse``), into ``target`` where given.

        ``batched``: ``x`` is a batch of pencils (a leading axis the stage leaves alone).

        FFT axes run as one transform, cosine and sine axes as another (the library's
        ``r2r_axes``), on real data where there is some (before the data turns complex, after it turns real again).
        ``turns``: this stage holds the first FFT axis of a real plan (``r2c`` along X,
        or a cast to complex for ``r2r``).
        """
        L, xp = self._local, self._xp()
        order = self._pencil_order(st.pencil)
        first = 1 if batched else 0  # the array axis of the pencil's slowest axis
        npax = {g: first + 2 - order.index(g) for g in st.axes}
        fft = [g for g in st.axes if self._transforms[g] == "fft"]

        r2r = tuple((npax[g], self._transforms[g]) for g in st.axes if self._transforms[g] != "fft")
        cos_sin: list[Callable[[Any, Any, bool], Any]] = [lambda y, o, w: L.r2r_axes(y, r2r, inverse, o, w)] if r2r else []
        halved = self._kind == "r2c" and 0 in fft
        # r2c / c2r: the halved X last, as the local libraries take it.
        axes = tuple(sorted(npax[g] for g in fft if not (halved and g == 0))) + ((npax[0],) if halved else ())
        ops: list[Callable[[Any, Any, bool], Any]] = []
        if not inverse:
            if turns:
                ops += cos_sin
                if halved:
                    ops.append(lambda y, o, w: L.r2c(y, axes, o))
                else:
                    ops.append(lambda y, o, w: L.c2c(_as(xp, y, self._out_dtype, o), axes, False, overwrite=True))
            else:
                if fft:
                    ops.append(lambda y, o, w: L.c2c(y, axes, False, o, w))
                ops += cos_sin
        elif turns:
            if halved:
                lengths = tuple(self._gdims[order[first + 2 - ax]] for ax in axes)
                ops.append(lambda y, o, w: L.c2r(y, axes, lengths, o, overwrite=w))
            else:
                ops.append(lambda y, o, w: _real_part(xp, L.c2c(y, axes, True, None, w), o))
            ops += cos_sin
        else:
            ops += cos_sin
            if fft:
                ops.append(lambda y, o, w: L.c2c(y, axes, True, o, w))
        for k, op in enumerate(ops):
            x = op(x, target if k == len(ops) - 1 else None, own)
            own = True
        # A library's transform along an axis other than the contiguous one may return a
        # strided array (CuPy does): the transposes and the caller take C-contiguous ones.
        return x if x.flags.c_contiguous else xp.ascontiguousarray(x)

    def _pencil_order(self, axis: int) -> tuple[int, int, int]:
        """Return the memory order (global axes, fastest first) of the plan's ``axis``-pencils."""
        return tuple(int(v) for v in self.spectral_grid.get_pencil_info(axis).order)  # type: ignore[return-value]
