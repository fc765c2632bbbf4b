"""The XLA FFI handlers of the package's core, registered with JAX once per process."""

from __future__ import annotations

import threading

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
