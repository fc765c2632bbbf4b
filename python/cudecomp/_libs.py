"""Finding the CUDA libraries the GPU variant loads at run time (NVRTC, NCCL).

Order: an environment override (``CUDECOMP_NVRTC_LIB``, ``CUDECOMP_NCCL_LIB``), NVIDIA's
PyPI wheels in site-packages, a CUDA toolkit under ``/usr/local/cuda*``, then the bare
soname for the system loader.
"""

from __future__ import annotations

import ctypes
import glob
import os
import site
import sys

__all__ = ["find", "preload_nvrtc", "prepare"]

_ENV = {"nccl": "CUDECOMP_NCCL_LIB", "nvrtc": "CUDECOMP_NVRTC_LIB"}
_WHEEL_PATHS = {
    "nccl": ["nvidia/nccl/lib/libnccl.so.2"],
    "nvrtc": ["nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"],
}
_SYSTEM_GLOBS = {
    "nccl": ["/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/local/cuda*/lib64/libnccl.so.2"],
    "nvrtc": [
        "/usr/local/cuda/lib64/libnvrtc.so.1[23]",
        "/usr/local/cuda*/lib64/libnvrtc.so.1[23]",
        "/usr/lib/x86_64-linux-gnu/libnvrtc.so.1[23]",
    ],
}
_SONAMES = {"nccl": "libnccl.so.2", "nvrtc": "libnvrtc.so.13"}


def _search_dirs() -> list[str]:
    dirs: list[str] = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # pragma: no cover - some embedded interpreters
        pass
    dirs.append(site.getusersitepackages())
    dirs += [p for p in sys.path if p.endswith("site-packages")]
    return list(dict.fromkeys(dirs))


def find(name: str) -> str:
    """Path (or soname) of library ``name`` ("nccl" or "nvrtc")."""
    override = os.environ.get(_ENV[name])
    if override:
        return override
    for d in _search_dirs():
        for rel in _WHEEL_PATHS[name]:
            p = os.path.join(d, rel)
            if os.path.exists(p):
                return p
    for pattern in _SYSTEM_GLOBS[name]:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return _SONAMES[name]


def preload_nvrtc() -> str:
    """Load NVRTC (and its builtins, which it opens by bare name) globally.

    The core's later ``dlopen("libnvrtc.so.13")`` then finds it by soname. Returns the path tried.
    """
    path = find("nvrtc")
    if os.path.isabs(path):
        for builtins in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
            try:
                ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass  # the core reports a missing NVRTC when it compiles the kernels
    return path


def prepare() -> str:
    """Preload NVRTC and return where NCCL is (called when a GPU Handle is created)."""
    preload_nvrtc()
    return find("nccl")
