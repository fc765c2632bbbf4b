"""Finding the CUDA libraries the GPU variant loads at run time (NVRTC, NCCL, NVSHMEM).

Order, for each library:

1. the user's override (``CUDECOMP_NVRTC_LIB``, ``CUDECOMP_NCCL_LIB``,
   ``CUDECOMP_NVSHMEM_LIB``, read with every other setting by the core when a handle is
   created and passed in here): a path or a soname, used as given;
2. NVIDIA's locator ``cuda-pathfinder`` (``cuda.pathfinder``), where it is installed
   (``pip install cudecomp[cu13]``): NVIDIA's PyPI wheels in site-packages, conda,
   ``CUDA_PATH``/``CUDA_HOME``, then the system loader; it loads the library it finds (or
   reports the one already loaded in the process, by CuPy for example);
3. otherwise, or where it finds nothing, our own search: NVIDIA's PyPI wheels in every
   site-packages directory (same ``nvidia/*/lib`` layout on x86_64 and aarch64), a CUDA
   toolkit under ``/usr/local/cuda*`` (``lib64`` and ``targets/{x86_64,sbsa}-linux/lib``)
   and the distribution's multiarch library directory;
4. the bare soname, for the system loader (``LD_LIBRARY_PATH``, ``ld.so.cache``).
"""

from __future__ import annotations

import ctypes
import glob
import os
import site
import sys
from dataclasses import dataclass

__all__ = ["find", "preload_nvrtc", "prepare"]

#: cuda-pathfinder's names of our libraries.
_PATHFINDER = {"nccl": "nccl", "nvrtc": "nvrtc", "nvshmem": "nvshmem_host"}
_WHEEL_PATHS = {
    "nccl": ["nvidia/nccl/lib/libnccl.so.2"],
    "nvrtc": ["nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"],
    "nvshmem": ["nvidia/nvshmem/lib/libnvshmem_host.so.3"],
}
_TOOLKIT_DIRS = [
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/local/cuda/targets/sbsa-linux/lib",
    "/usr/local/cuda*/lib64",
    "/usr/local/cuda*/targets/x86_64-linux/lib",
    "/usr/local/cuda*/targets/sbsa-linux/lib",
]
_SYSTEM_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64"]
_FILES = {"nccl": ["libnccl.so.2"], "nvrtc": ["libnvrtc.so.1[23]"], "nvshmem": ["libnvshmem_host.so.3"]}
_SONAMES = {"nccl": "libnccl.so.2", "nvrtc": "libnvrtc.so.13", "nvshmem": "libnvshmem_host.so.3"}


def _search_dirs() -> list[str]:
    dirs: list[str] = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # pragma: no cover - some embedded interpreters
        pass
    dirs.append(site.getusersitepackages())
    dirs += [p for p in sys.path if p.endswith("site-packages")]
    return list(dict.fromkeys(dirs))


def _pathfinder(name: str) -> str | None:
    """Where cuda-pathfinder finds (and loads) ``name``; None when it is absent or finds nothing."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except ImportError:
        return None
    try:
        path = load_nvidia_dynamic_lib(_PATHFINDER[name]).abs_path
    except Exception:  # not found, unsupported here, or a loader error: fall back to our search
        return None
    return path if path and os.path.isabs(path) else None


def _own_search(name: str) -> str | None:
    for d in _search_dirs():
        for rel in _WHEEL_PATHS[name]:
            p = os.path.join(d, rel)
            if os.path.exists(p):
                return p
    for d in _TOOLKIT_DIRS + _SYSTEM_DIRS:
        for f in _FILES[name]:
            hits = sorted(glob.glob(os.path.join(d, f)))
            if hits:
                return hits[-1]
    return None


def find(name: str, override: str | None = None) -> str:
    """Path (or soname) of library ``name`` ("nccl", "nvrtc" or "nvshmem"): ``override`` when given, else searched."""
    if override:
        return override
    return _pathfinder(name) or _own_search(name) or _SONAMES[name]


def preload_nvrtc(override: str | None = None) -> str:
    """Load NVRTC (and its builtins, which it opens by bare name) globally.

    The core's later ``dlopen("libnvrtc.so.13")`` then finds it by soname. Returns the path tried.
    """
    path = find("nvrtc", override)
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


@dataclass(frozen=True)
class Found:
    """Where a GPU handle loads NCCL and NVSHMEM from (paths or sonames)."""

    nccl: str
    nvshmem: str


def prepare(nvrtc: str | None = None, nccl: str | None = None, nvshmem: str | None = None) -> Found:
    """Preload NVRTC; return where NCCL and NVSHMEM are (called when a GPU Handle is created).

    The arguments are the user's overrides (``CUDECOMP_NVRTC_LIB``, ``CUDECOMP_NCCL_LIB``,
    ``CUDECOMP_NVSHMEM_LIB``, read by the core's settings). NVSHMEM's host library is large
    and only NVSHMEM backends need it: it is located here without being loaded (the
    override, our own search, else the soname).
    """
    preload_nvrtc(nvrtc)
    return Found(nccl=find("nccl", nccl), nvshmem=nvshmem or _own_search("nvshmem") or _SONAMES["nvshmem"])
