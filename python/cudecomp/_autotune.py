"""What the autotuner measured: ``GridDesc.autotune_result`` after ``Handle.create_grid``."""

from __future__ import annotations

from dataclasses import dataclass

from ._enums import HaloCommBackend, TransposeCommBackend

__all__ = ["AutotuneResult", "AutotuneTrial"]


@dataclass(frozen=True)
class AutotuneTrial:
    """One measured candidate of a search.

    ``mode`` is ``"transpose"`` or ``"halo"``; ``time_ms`` the weighted mean time of the
    four transposes (mean over ranks of each rank's mean over trials), or the mean time of
    one round of three halo updates; ``per_op_ms`` the four transposes' means (X->Y, Y->Z,
    Z->Y, Y->X; for halos the round first, then zeros); ``skipped`` when the first trial
    exceeded ``skip_threshold`` times the best so far and the candidate was dropped.
    """

    mode: str
    pdims: tuple[int, int]
    backend: TransposeCommBackend | HaloCommBackend
    time_ms: float
    per_op_ms: tuple[float, float, float, float]
    skipped: bool


@dataclass(frozen=True)
class AutotuneResult:
    """Every candidate measured while creating a grid, and what was chosen."""

    trials: tuple[AutotuneTrial, ...]
    pdims: tuple[int, int]
    transpose_backend: TransposeCommBackend
    halo_backend: HaloCommBackend
    log: tuple[str, ...]

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
