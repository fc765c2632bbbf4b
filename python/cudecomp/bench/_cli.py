"""The command line: arguments, the checks before measuring, the sweep over configurations."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from mpi4py import MPI

import cudecomp
from cudecomp import TransposeCommBackend

from . import _fft_local, _fft_r2r
from ._baselines import xy_baselines
from ._common import DEFAULT_OPS, DTYPES, OPS, Case, Row
from ._io import io_rows
from ._measure import Ceilings, CopyFloor, Session, Xp
from ._ops import autotune, fft_rows, run_config
from ._progress import PROGRESS_MODES, Progress, tqdm_class
from ._record import command_line, machine_label, records, settings
from ._redistribute import redistribution_rows
from ._report import plot, report, write


def parse_grid(s: str) -> tuple[int, int, int]:
    """Parse a global grid: ``256^3``, ``128,96,64``, ``128x96x64`` or ``64`` (a cube)."""
    try:
        if "^" in s:
            n = int(s.split("^")[0])
            v = [n, n, n]
        else:
            v = [int(t) for t in s.replace("x", ",").split(",")]
            v = v * 3 if len(v) == 1 else v
    except ValueError:
        v = []
    if len(v) != 3 or min(v) < 1:
        raise argparse.ArgumentTypeError(f"invalid grid {s!r}: expected N^3, NX,NY,NZ or NXxNYxNZ with positive sizes")
    if v[0] * v[1] * v[2] >= 2**63:
        raise argparse.ArgumentTypeError(f"invalid grid {s!r}: {v[0]} x {v[1]} x {v[2]} cells do not fit in 64 bits")
    return (v[0], v[1], v[2])


def parse_backends(s: str) -> str:
    """Validate ``--backends``: ``all`` or comma-separated TransposeCommBackend names."""
    if s != "all":
        bad = [b for b in s.split(",") if b not in TransposeCommBackend.__members__]
        if bad:
            names = ", ".join(TransposeCommBackend.__members__)
            raise argparse.ArgumentTypeError(f"unknown backend(s) {', '.join(bad)}; choose from {names}, or all")
    return s


def _int_at_least(least: int, what: str) -> Any:
    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            v = least - 1
        if v < least:
            raise argparse.ArgumentTypeError(f"invalid value {s!r}: expected {what}")
        return v

    return parse


#: ``--reps``: at least one timed call.
positive_int = _int_at_least(1, "an integer >= 1")
#: ``--warmup``, ``--graph``, ``--halo``: counts and extents.
non_negative_int = _int_at_least(0, "an integer >= 0")


def process_grids(spec: str, n: int) -> list[tuple[int, int]]:
    """Process grids of ``n`` ranks: ``all`` of them, or those of ``spec`` (``1x2,2x1``) whose product is ``n``."""
    if spec == "all":
        return [(r, n // r) for r in range(1, n + 1) if n % r == 0]
    return [(r, c) for r, c in parse_pdims(spec) if r * c == n]


def parse_pdims(spec: str) -> list[tuple[int, int]]:
    """Validate ``--pdims``: ``all`` (an empty list here) or comma-separated ``RxC`` with positive ``R``, ``C``."""
    if spec == "all":
        return []
    out = []
    for s in spec.split(","):
        try:
            r, c = (int(v) for v in s.split("x"))
        except ValueError:
            r = c = 0
        if r < 1 or c < 1:
            raise argparse.ArgumentTypeError(f"invalid process grid {s!r} in {spec!r}: expected all, or RxC[,RxC...] with positive R and C")
        out.append((r, c))
    return out


def pdims_arg(spec: str) -> str:
    """``--pdims`` as given, once it parses (``parse_pdims``)."""
    parse_pdims(spec)
    return spec


def default_backends(xp: Xp) -> list[str]:
    """Transpose backends measured by ``--backends all`` (NCCL ones only with a GPU per rank)."""
    names = ["MPI_P2P", "MPI_P2P_PL", "MPI_A2A"]
    if xp.own_gpus:
        names = ["NCCL", "NCCL_PL"] + names
    return names + ["DIRECT"]


def run(args: argparse.Namespace) -> list[Row]:
    """Measure every configuration of ``args`` (collective); the rows, the same on every rank."""
    comm = MPI.COMM_WORLD
    xp = Xp()  # selects this rank's GPU before the handle binds it
    handle = cudecomp.Handle(comm)
    ceils = Ceilings(xp, comm, args.warmup, args.reps, handle.one_node())
    s = Session(args, comm, xp, handle, ceils, CopyFloor() if args.floor else None)
    backends = args.backends.split(",") if args.backends != "all" else default_backends(xp)
    rows: list[Row] = []
    grids = process_grids(args.pdims, comm.size)
    total = len(args.gdims) * len(args.dtypes) * len(args.axis_contiguous) * len(backends) * len(grids)
    progress = Progress(total, "off" if args.quiet else args.progress, enabled=comm.rank == 0)
    one_device: dict[tuple[Any, ...], dict[str, float]] = {}  # same-run single-device fftn, per grid and dtype
    try:
        if args.autotune:
            for gdims in args.gdims:
                rows += [autotune(s, gdims, d, bool(ac)) for d in args.dtypes for ac in args.axis_contiguous]
        for gdims in args.gdims:
            for pdims in grids:
                for dname in args.dtypes:
                    case = Case(gdims, pdims, dname)
                    base = xy_baselines(s, case) if args.baselines and "xy" in args.ops else {}
                    for i, ac in enumerate(args.axis_contiguous):
                        for bname in backends:
                            g, p = "x".join(map(str, gdims)), "x".join(map(str, pdims))
                            progress.start(f"{g} {p} {dname} {bname} ac={ac}")
                            if any(op in OPS or op == "halo" for op in args.ops):
                                rows += run_config(s, case, bool(ac), bname, base)
                            if "fft" in args.ops and i == 0:  # the plan chooses its own layouts
                                rows += fft_rows(s, case, bname, one_device)
                            if "redistribute" in args.ops and i == 0:
                                rows += redistribution_rows(s, case, bname)
                            if "io" in args.ops and i == 0:
                                rows += io_rows(s, case, bname)
                            progress.done()
    finally:
        progress.close()
        if s.floor is not None:
            s.floor.close()
    handle.finalize()
    for r in rows:
        r.baseline = {**r.baseline, **{f"ceiling_{k}_gbps": v for k, v in ceils.run_wide.items()}}
    return rows


class _Parser(argparse.ArgumentParser):
    """An argument parser that writes its messages (help, usage errors) on rank 0 only: every rank parses alike."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if MPI.COMM_WORLD.rank == 0:
            super()._print_message(message, file)


def parser() -> argparse.ArgumentParser:
    """Build the command-line parser; every option's help ends with its default."""
    p = _Parser(
        prog="python -m cudecomp.bench",
        description=(sys.modules[__package__].__doc__ or "").split("\n\n")[0] or None,
        epilog="Run under MPI, e.g. mpiexec -n 4 python -m cudecomp.bench --gdims 128^3 --pdims all --plot out/",
    )
    ops = ", ".join([*DEFAULT_OPS, "halo"])
    choices = [*OPS, "halo", "fft", "redistribute", "io"]
    p.add_argument(
        "--gdims",
        nargs="+",
        type=parse_grid,
        default=[(64, 64, 64)],
        metavar="GRID",
        help="global grids, each N^3, NX,NY,NZ or NXxNYxNZ (default: 64^3)",
    )
    p.add_argument(
        "--pdims",
        default="all",
        type=pdims_arg,
        help="process grids: all (every factorisation of the rank count) or a list like 1x2,2x1 (default: all)",
    )
    p.add_argument(
        "--backends",
        default="all",
        type=parse_backends,
        help="comma-separated TransposeCommBackend names (e.g. MPI_P2P,DIRECT), or all (default: all)",
    )
    p.add_argument("--dtypes", nargs="+", default=["c128"], choices=list(DTYPES), help="element types (default: c128)")
    p.add_argument(
        "--axis-contiguous",
        nargs="+",
        type=int,
        default=[0],
        choices=[0, 1],
        help="pencil layouts: 0 = default, 1 = axis-contiguous (default: 0)",
    )
    p.add_argument(
        "--ops",
        nargs="+",
        default=[*DEFAULT_OPS, "halo"],
        choices=choices,
        help="operations to time (xz, zx: the X<->Z transposes in one exchange); fft = a cudecomp.fft plan's forward and "
        "backward transform; redistribute = redistributions (X->Y beside the transpose, X->Z beside X->Y->Z and "
        "mpi4py-fft, a new process grid and bricks to pencils beside MPI_Alltoallw and a gather-scatter); io = "
        f"cudecomp.io's one-file write and read beside every rank's own file (--io-dir) (default: {ops})",
    )
    p.add_argument(
        "--fft-out",
        default="transposed",
        choices=["transposed", "natural", "both"],
        help="--ops fft: spectral output left in the Z-pencil (transposed, no return transposes) or returned to the "
        "X-pencil (natural; rows fft-natural, ifft-natural) (default: transposed)",
    )
    p.add_argument(
        "--fft-norm",
        default="backward",
        choices=["backward", "ortho", "forward"],
        help="--ops fft: the plans' norm, as numpy.fft's (which direction scales; the one-device baseline uses it too) (default: backward)",
    )
    p.add_argument(
        "--halo",
        nargs=3,
        type=non_negative_int,
        default=[1, 1, 1],
        metavar=("HX", "HY", "HZ"),
        help="halo extents (>= 0) for the halo benchmark; a row whose extent exceeds the cells a rank owns along its "
        "dimension is skipped with the reason (default: 1 1 1)",
    )
    p.add_argument(
        "--graph",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="GPU: also capture N of each transpose and halo update into a CUDA graph and time its replay against "
        "N eager calls, wall clock per operation (rows op-graph; capturable backends only; 0 = off) (default: 0)",
    )
    p.add_argument(
        "--jax",
        action="store_true",
        help="also time each transpose and FFT as a jitted cudecomp.jax operation on JAX arrays, beside the eager call of "
        "the same run (rows op-jax, baseline eager_ms; needs JAX) (default: False)",
    )
    p.add_argument(
        "--fields",
        type=positive_int,
        default=1,
        help="fields per transpose and halo update: K > 1 moves a batch of K pencils in one exchange, beside K calls of one field "
        "and, for transposes, one exchange of the same bytes (the grid K times longer along Z, the bound) (default: 1)",
    )
    p.add_argument(
        "--alloc",
        choices=["user", "library"],
        default="user",
        help="arrays of the transposes: user (NumPy/CuPy arrays made by the benchmark) or library "
        "(GridDesc.empty_pencil: on DIRECT grids node-shared host memory or exported device memory, where "
        "transposes then run as single copies) (default: user)",
    )
    p.add_argument(
        "--floor",
        action="store_true",
        help="beside each distributed transpose, time the copy floor: every rank copying its own input pencil once "
        "with cudecomp's copy (a 1x1 grid of its own), all ranks at once; baselines copy_floor_ms, ratio_vs_copy_floor "
        "(default: off)",
    )
    p.add_argument(
        "--fft-stages",
        action="store_true",
        help="--ops fft: also time each stage of the transposed-output forward transform alone (its local FFTs and "
        "transposes, back to back as without streaming; rows stage-*, baseline fft_ms: the whole forward) (default: off)",
    )
    p.add_argument(
        "--io-dir",
        default=".",
        help="--ops io: the directory (on the file system to measure) under which each configuration's files are "
        "written, then removed; . is the current directory (default: .)",
    )
    p.add_argument("--warmup", type=non_negative_int, default=3, help="untimed calls before timing (default: 3)")
    p.add_argument("--reps", type=positive_int, default=10, help="timed calls; the median is reported (default: 10)")
    p.add_argument(
        "--no-baselines", dest="baselines", action="store_false", help="skip the peer baselines of distributed X->Y (default: measure them)"
    )
    p.add_argument("--autotune", action="store_true", help="also run the autotuner (grid + backend) and report its choice (default: off)")
    p.add_argument("--json", metavar="FILE", help="write rows as JSON (default: not written)")
    p.add_argument("--csv", metavar="FILE", help="write rows as CSV (default: not written)")
    p.add_argument(
        "--record",
        metavar="FILE",
        help="append every figure to the history file FILE (CSV: date, commit, machine, ranks, command, case, metric, "
        "value; created if missing); python -m cudecomp.bench.history makes the record page from it (default: not written)",
    )
    p.add_argument(
        "--machine",
        metavar="NAME",
        help="--record: the machine's name in the history (default: GPUs and their model on GPUs, e.g. 2xH200; "
        "the core count on CPUs, e.g. 16-core host)",
    )
    p.add_argument(
        "--commit",
        metavar="REV",
        help="--record: the commit measured (default: git rev-parse --short HEAD in the current directory, else unknown)",
    )
    p.add_argument("--plot", metavar="DIR", help="directory for PNG heatmaps and bandwidth plots; needs matplotlib (default: no plots)")
    p.add_argument(
        "--progress",
        default="auto",
        choices=PROGRESS_MODES,
        help="progress on rank 0's stderr: auto = a tqdm bar when stderr is a terminal and tqdm is installed, else none; "
        "bar = a tqdm bar even into a pipe (mpiexec's ranks write into pipes); lines = one plain line per configuration; "
        "off (default: auto)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress output, the same as --progress off (default: off)")
    _fft_local.add_arguments(p)
    return p


def preflight(args: argparse.Namespace, comm: MPI.Comm) -> str:
    """Check, before any measurement, what the end of the run needs (collective).

    Returns the first problem found on rank 0 (the one that writes and plots), the same
    on every rank, or "".
    """
    problem = ""
    if comm.rank == 0:
        problem = _output_problem(args)
    if not problem and not process_grids(args.pdims, comm.size):
        problem = f"--pdims {args.pdims}: no process grid of {comm.size} ranks"
    if not problem and args.fft_compare:
        parsed = _fft_r2r.parse(args.fft_transforms)
        problem = parsed if isinstance(parsed, str) else ""
    return comm.bcast(problem, root=0)


def _output_problem(args: argparse.Namespace) -> str:
    if args.plot:
        try:
            importlib.import_module("matplotlib")
        except ImportError:
            return "--plot needs matplotlib, which is not installed (pip install matplotlib), or leave out --plot"
        try:
            os.makedirs(args.plot, exist_ok=True)
        except OSError as e:
            return f"--plot {args.plot}: cannot create the directory: {e}"
    if args.graph and cudecomp.CPU_ONLY:
        return "--graph needs the GPU variant (CUDA graphs); this is the CPU variant"
    if args.jax and importlib.util.find_spec("jax") is None:
        return "--jax needs JAX, which is not installed (pip install jax)"
    if args.jax and args.alloc == "library":
        return "--jax times JAX's own arrays; leave out --alloc library"
    if args.progress == "bar" and not args.quiet and tqdm_class() is None:
        return "--progress bar needs tqdm, which is not installed (pip install tqdm)"
    for opt in ("json", "csv"):
        path = getattr(args, opt)
        if path and os.path.isdir(path):
            return f"--{opt} {path}: is a directory; expected the path of a file"
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            return f"--{opt} {path}: the directory does not exist"
    if args.record:
        from . import history  # imported when used: `python -m cudecomp.bench.history` runs it as __main__

        problem = history.check_file(args.record)
        if problem:
            return problem
    elif args.machine or args.commit:
        return "--machine and --commit name what --record writes; give --record FILE too"
    if "io" in args.ops:
        if importlib.util.find_spec("h5py") is None:
            return "--ops io needs h5py (cudecomp.io), which is not installed (pip install h5py)"
        if not os.path.isdir(args.io_dir):
            return f"--io-dir {args.io_dir}: the directory does not exist"
    if args.fft_stages and "fft" not in args.ops:
        return "--fft-stages times the stages of --ops fft; add fft to --ops"
    if args.fft_stages and args.fft_out == "natural":
        return "--fft-stages times the transposed-output forward; use --fft-out transposed or both"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (all ranks) and report on rank 0; a usage problem exits with status 2 before measuring."""
    p = parser()
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    problem = preflight(args, comm)
    if problem:
        p.error(problem)  # the same on every rank: usage and error on rank 0, exit status 2
    if args.fft_compare:
        compared = _fft_local.main(args, process_grids(args.pdims, comm.size))
        if comm.rank == 0 and args.record:
            record(p, args, comm.size, _fft_local.records(compared, comm.size, settings(os.environ)))
        return 0
    rows = run(args)
    if comm.rank == 0:
        report(rows)
        write(rows, args)
        if args.plot:
            plot(rows, args.plot)
        if args.record:
            record(p, args, comm.size, records(rows, args, settings(os.environ)))
    return 0


def record(p: argparse.ArgumentParser, args: argparse.Namespace, ranks: int, figures: list[tuple[str, str, float | str]]) -> None:
    """Append the run's ``(case, metric, value)`` figures to ``--record``'s history file (rank 0)."""
    from . import history

    run_info = history.Run(
        date=time.strftime("%Y-%m-%d"),
        commit=args.commit or git_commit(),
        machine=args.machine or machine_label(),
        ranks=ranks,
        command=command_line(p, args, os.environ),
    )
    n = history.append(args.record, run_info, figures)
    print(f"recorded {n} figures in {args.record}")


def git_commit() -> str:
    """Return the short hash of the current directory's git checkout, or ``unknown``."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"
