"""The package's one way to settle a collective step among the ranks of a handle.

``with collective(handle, what) as call:`` runs a block that every rank enters at the
same point of its program (its own checks, its share of the work, rank 0's part alone).
The block may name the arguments that must be alike on every rank (``call.agree(...)``).
On leaving, the ranks settle the outcome in one collective call of the core
(``Handle._settle``): a rank whose block raised raises its own exception, every other
rank ``InvalidUsageError`` naming it, the step and the error; ranks at different steps,
or with different arguments, all raise naming both. Nothing waits for a rank that gave
up, and what comes after the block runs only where every rank succeeded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


class Call:
    """The arguments of one collective step, as this rank gives them (``agree``)."""

    def __init__(self) -> None:
        self.fields: list[tuple[str, str]] = []

    def agree(self, **values: Any) -> None:
        """Name arguments that must be the same on every rank (compared by their text, in order)."""
        self.fields += [(k, v if isinstance(v, str) else repr(v)) for k, v in values.items()]


@contextlib.contextmanager
def collective(handle: Any, what: str) -> Iterator[Call]:
    """Run a block as one collective step ``what`` of ``handle``'s ranks, settled on leaving it (collective)."""
    call = Call()
    try:
        yield call
    except BaseException as e:
        # A handle that is gone (finalized, MPI finalized) cannot settle: this rank's own
        # error stands.
        with contextlib.suppress(Exception):
            handle._settle(what, call.fields, f"{type(e).__name__}: {e}")
        raise
    handle._settle(what, call.fields)
