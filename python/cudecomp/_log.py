"""The ``cudecomp`` logger: autotuning and performance-report messages (rank 0 only).

By default the messages are shown on standard output, as upstream prints them, by a
handler of the ``cudecomp`` logger itself (which does not propagate). Silence them with
``logging.getLogger("cudecomp").setLevel(logging.WARNING)``; route them through your own
logging set-up with ``cudecomp.log_to_root()`` (drops the default handler and lets the
records propagate).
"""

from __future__ import annotations

import logging
import sys

__all__ = ["log_to_root", "logger"]

logger = logging.getLogger("cudecomp")


class _DefaultHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Handler writing bare messages to the current ``sys.stdout``.

    pytest, notebooks and redirections replace ``sys.stdout``; the handler follows.
    """

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    @property  # type: ignore[override]
    def stream(self) -> object:
        """The current standard output."""
        return sys.stdout

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def _install_default() -> None:
    if not logger.handlers:
        logger.addHandler(_DefaultHandler())
        logger.propagate = False
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)


def log_to_root() -> None:
    """Send cudecomp's messages through the application's logging configuration.

    Removes the default standard-output handler of the ``cudecomp`` logger and lets its
    records propagate to the root logger's handlers (e.g. those of ``logging.basicConfig``).
    """
    for h in [h for h in logger.handlers if isinstance(h, _DefaultHandler)]:
        logger.removeHandler(h)
    logger.propagate = True


def _emit(lines: list[str]) -> None:
    """Log ``lines`` at INFO (called by the extension on rank 0)."""
    for line in lines:
        logger.info(line.rstrip("\n"))


_install_default()
