"""Progress over configurations on rank 0's stderr."""

from __future__ import annotations

import importlib
import sys
from typing import Any, TextIO

PROGRESS_MODES = ("auto", "bar", "lines", "off")


class Progress:
    """Progress over configurations, written to stderr by rank 0 only.

    Modes: ``auto`` (a tqdm bar when the stream is a terminal and tqdm is installed,
    else nothing, so that files and pipes get no carriage-return bars), ``bar`` (a tqdm
    bar wherever the stream goes, e.g. under ``mpiexec``, whose ranks write into pipes),
    ``lines`` (one plain line per configuration, for logs) and ``off``.
    """

    def __init__(self, total: int, mode: str, enabled: bool = True, stream: TextIO | None = None) -> None:
        if mode not in PROGRESS_MODES:
            raise ValueError(f"progress mode {mode!r}: expected one of {', '.join(PROGRESS_MODES)}")
        self.total, self.count = total, 0
        self.bar: Any = None
        self.stream: TextIO = sys.stderr if stream is None else stream
        self.mode = mode if enabled else "off"
        if self.mode == "auto":
            self.mode = "bar" if _isatty(self.stream) and tqdm_class() is not None else "off"
        if self.mode == "bar":
            tqdm = tqdm_class()
            if tqdm is None:
                raise RuntimeError("--progress bar needs tqdm, which is not installed (pip install tqdm)")
            self.bar = tqdm(total=total, file=self.stream, unit="config", dynamic_ncols=True)

    def start(self, desc: str) -> None:
        """Announce the next configuration, described by ``desc``."""
        self.count += 1
        if self.bar is not None:
            self.bar.set_postfix_str(desc)
        elif self.mode == "lines":
            self.stream.write(f"[{self.count}/{self.total}] {desc}\n")
            self.stream.flush()

    def done(self) -> None:
        """Count the configuration announced last as finished."""
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        """Finish the bar (if any)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def tqdm_class() -> Any:
    """Return ``tqdm.tqdm``, or None when tqdm is not installed."""
    try:
        return importlib.import_module("tqdm").tqdm
    except ImportError:
        return None


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
