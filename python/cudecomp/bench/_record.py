"""What ``--record`` writes: each row's case name and figures, the run's command and machine."""

from __future__ import annotations

import argparse
import math
import os
import shlex
from collections.abc import Mapping, Sequence

import cudecomp

from ._common import HALO_OPS, OPS, Row

#: Options that only say where results go: the recorded command leaves them out.
OUTPUT_OPTIONS = {"json", "csv", "plot", "progress", "quiet", "record", "machine", "commit", "help"}

#: Prefixes of the environment variables the recorded command shows (the library's and its
#: communication libraries' settings, and the MPS daemon the processes share a GPU through;
#: ``*_VERSION``, which images set to name what they installed, is left out).
COMMAND_ENV = ("CUDECOMP_", "NCCL_", "NVSHMEM_", "CUDA_MPS_PIPE_DIRECTORY")


def settings(environ: Mapping[str, str]) -> dict[str, str]:
    """Return the library's settings in ``environ`` (``CUDECOMP_*``): they change what a case measures."""
    return {k: v for k, v in sorted(environ.items()) if k.startswith("CUDECOMP_")}


def grid_name(dims: Sequence[int]) -> str:
    """Name a global grid as the history does: ``256^3`` for a cube, else ``NXxNYxNZ``."""
    return f"{dims[0]}^3" if len(set(dims)) == 1 else "x".join(map(str, dims))


def _value(v: object) -> str:
    if isinstance(v, tuple) and len(v) == 3:
        return grid_name(v) if len(set(v)) == 1 else ",".join(map(str, v))
    return str(v)


def command_line(p: argparse.ArgumentParser, args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    """Return the run's command: the settings it ran with, then ``python -m cudecomp.bench`` and the measuring options.

    Options are written in canonical form (the parser's long names, only those that differ
    from their defaults), so the same measurement always reads the same; the MPI launcher
    and the output options (``OUTPUT_OPTIONS``) are left out.
    """
    env = [f"{k}={v}" for k, v in sorted(environ.items()) if k.startswith(COMMAND_ENV) and not k.endswith("_VERSION")]
    words = ["python", "-m", "cudecomp.bench"]
    for a in p._actions:
        if not a.option_strings or a.dest in OUTPUT_OPTIONS:
            continue
        v = getattr(args, a.dest)
        if v == a.default:
            continue
        opt = max(a.option_strings, key=len)
        if a.nargs == 0:  # a flag (store_true, store_false)
            words.append(opt)
        else:
            words += [opt, *(_value(x) for x in (v if isinstance(v, list) else [v]))]
    return shlex.join(env + words)


def machine_label() -> str:
    """Name the machine as the history does by default: ``<n>x<GPU model>`` (GPU variant) or ``<n>-core host``."""
    if not cudecomp.CPU_ONLY:
        try:
            import cupy

            n = cupy.cuda.runtime.getDeviceCount()
            name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
            name = name.decode() if isinstance(name, bytes) else str(name)
            return f"{n}x{name.removeprefix('NVIDIA ').replace(' ', '-')}"
        except Exception:  # no CuPy or no device: fall back to the host
            pass
    return f"{os.cpu_count()}-core host"


def case_name(r: Row, args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """Name what a row measured, as the history does: ``op grid dtype pdims backend`` and what else sets it apart."""
    if r.op == "tune":
        words = ["tune", grid_name(r.gdims), r.dtype]
    else:
        words = [r.op, grid_name(r.gdims), r.dtype, f"{r.pdims[0]}x{r.pdims[1]}", r.backend]
    base = r.op.removesuffix("-graph")
    if r.axis_contiguous:
        words.append("ac")
    if base in HALO_OPS:
        words.append("halo=" + ",".join(map(str, r.halo)))
    if base in OPS and args.alloc != "user":
        words.append(f"alloc={args.alloc}")
    if (base in OPS or base in HALO_OPS) and getattr(args, "fields", 1) > 1:
        words.append(f"fields={args.fields}")
    if r.op.endswith("-graph"):
        words.append(f"graph={args.graph}")
    if r.op.split("-")[0] in ("fft", "ifft", "stage") and args.fft_norm != "backward":
        words.append(f"norm={args.fft_norm}")
    words += [f"{k}={v}" for k, v in env.items()]
    return " ".join(words)


def records(rows: Sequence[Row], args: argparse.Namespace, env: Mapping[str, str]) -> list[tuple[str, str, float | str]]:
    """``(case, metric, value)`` of every measured row, after the run-wide ceilings (case ``ceilings``).

    Metrics: ``ms`` (the median of the slowest rank), ``gbps_per_rank`` and
    ``pct_of_<ceiling>`` where they apply, and every baseline of the row under its own
    name (``<name>_ms``, ``ratio_vs_<name>``, ...); the autotuner's row gives ``ms`` (the
    search) and ``chose``. Rows that were skipped give none.
    """
    out: list[tuple[str, str, float | str]] = []
    if rows:
        for k, v in rows[0].baseline.items():
            if k.startswith("ceiling_") and k.endswith("_gbps") and math.isfinite(v):
                out.append(("ceilings", k[len("ceiling_") :], v))
    for r in rows:
        case = case_name(r, args, env)
        if r.note.startswith(("skipped", "graph skipped")) or not math.isfinite(r.ms):
            continue
        if r.op == "tune":
            out += [(case, "ms", r.ms), (case, "chose", f"{r.backend} {r.pdims[0]}x{r.pdims[1]}")]
            continue
        if r.note:
            continue
        out.append((case, "ms", r.ms))
        if math.isfinite(r.gbps_per_rank):
            out.append((case, "gbps_per_rank", r.gbps_per_rank))
        if r.ceiling and math.isfinite(r.pct_of_ceiling):
            out.append((case, f"pct_of_{r.ceiling}", r.pct_of_ceiling))
        out += [(case, k, v) for k, v in r.baseline.items() if not k.startswith("ceiling_") and math.isfinite(v)]
    return out
