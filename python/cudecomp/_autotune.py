"""What the autotuner measured: ``GridDesc.autotune_result`` after ``Handle.create_grid``."""

from __future__ import annotations

from dataclasses import dataclass

from ._enums import HaloCommBackend, TransposeCommBackend

__all__ = ["AutotuneResult", "AutotuneTrial"]


@dataclass(frozen=True)
class AutotuneTrial:
    """One measured candidate of a search (an element of ``AutotuneResult.trials``)."""

    mode: str
    """``"transpose"`` or ``"halo"``: which search measured it."""
    pdims: tuple[int, int]
    """The candidate process grid ``(P_rows, P_cols)``."""
    backend: TransposeCommBackend | HaloCommBackend
    """The candidate backend: a ``TransposeCommBackend`` or a ``HaloCommBackend`` member."""
    time_ms: float
    """The score, in milliseconds: the weighted sum of the four transposes' mean times
    (each the mean over ranks of every rank's mean over trials), or the mean time of one
    round of three halo updates."""
    per_op_ms: tuple[float, float, float, float]
    """The four transposes' mean times (X->Y, Y->Z, Z->Y, Y->X); for halos the round's time
    first, then zeros."""
    skipped: bool
    """True when the candidate was abandoned: its first timed trial, multiplied by
    ``skip_threshold``, already exceeded the best score so far (``time_ms`` is then
    infinite)."""


@dataclass(frozen=True)
class AutotuneResult:
    """Every candidate measured while creating a grid, and what was chosen.

    Returned by [`GridDesc.autotune_result`][cudecomp.GridDesc.autotune_result] (``None``
    when ``create_grid`` ran no search); the same on every rank.
    """

    trials: tuple[AutotuneTrial, ...]
    """Every candidate in the order measured: the transpose search's, then the halo search's
    (or the other way round with ``AutotuneGridMode.HALO``)."""
    pdims: tuple[int, int]
    """The chosen process grid."""
    transpose_backend: TransposeCommBackend
    """The chosen (or configured) transpose backend."""
    halo_backend: HaloCommBackend
    """The chosen (or configured) halo backend."""
    log: tuple[str, ...]
    """The search's messages, as rank 0 logged them (logger ``cudecomp``)."""

    @classmethod
    def _from_core(
        cls,
        trials: list[tuple[str, tuple[int, int], int, float, tuple[float, float, float, float], bool]],
        chosen: tuple[tuple[int, int], int, int],
        log: list[str],
    ) -> AutotuneResult:
        made = tuple(
            AutotuneTrial(
                mode,
                tuple(pd),  # type: ignore[arg-type]
                TransposeCommBackend(b) if mode == "transpose" else HaloCommBackend(b),
                t,
                tuple(ops),  # type: ignore[arg-type]
                skipped,
            )
            for mode, pd, b, t, ops, skipped in trials
        )
        pd, tb, hb = chosen
        return cls(made, tuple(pd), TransposeCommBackend(tb), HaloCommBackend(hb), tuple(log))  # type: ignore[arg-type]

    def table(self) -> str:
        """Return the trials as an aligned text table (one row per candidate)."""
        rows = [f"{'mode':<9} {'pdims':>9} {'backend':<22} {'time [ms]':>10}"]
        for t in self.trials:
            time = "skipped" if t.skipped else f"{t.time_ms:.3f}"
            rows.append(f"{t.mode:<9} {t.pdims[0]:>4} x {t.pdims[1]:<2} {t.backend.name:<22} {time:>10}")
        return "\n".join(rows)
