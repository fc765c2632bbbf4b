"""A plan's schedule as data: the local transforms and transposes its forward runs.

``forward_stages(schedule, transposed_out)`` lists the steps once per plan; the backward
transform runs the same list in reverse, each local stage inverted and each transpose
taken the other way. Each local stage transforms some global axes of the pencil the
data is in; what each axis's transform is (an FFT, a cosine or sine transform) is the
plan's per-axis option, read by the stage (``_plan.FFT._local_stage``).
"""

from __future__ import annotations

from dataclasses import dataclass

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
