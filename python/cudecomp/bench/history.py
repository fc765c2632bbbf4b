"""The benchmark's history file and the page of current figures made from it.

``python -m cudecomp.bench ... --record FILE`` appends one line per figure to a CSV
history file (columns ``FIELDS``: date, commit, machine, ranks, command, case, metric,
value). A *run* is one invocation: its date, commit, machine, rank count and command (the
settings it ran with and its measuring options, without the MPI launcher). A *case* names
what was measured (``xy 1024^3 c128 2x1 DIRECT``); each of its *metrics* is one figure of
that run (``ms``, ``pct_of_peer_copy``, ``raw_nccl_alltoall_ms``, ``ratio_vs_raw_nccl_alltoall``, ...).

``python -m cudecomp.bench.history FILE --update PAGE`` rewrites the table between the
markers ``<!-- figures:begin -->`` and ``<!-- figures:end -->`` of a Markdown page: each
table row names a machine and a case, and gets that case's newest run on that machine
(the last in the file): its figure, what it was compared with in the same run, its date,
commit and command. ``--check`` says whether the page is up to date; ``--list`` prints the
newest run of every (machine, case).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

FIELDS = ("date", "commit", "machine", "ranks", "command", "case", "metric", "value")
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"
TABLE_HEAD = "| machine | case | figure | compared with (same run) | date | commit | run |"

# What the page calls the ceilings and baselines that metric names carry.
LABELS = {
    "peer_copy": "peer copy",
    "device_copy": "device copy",
    "host_copy": "host copy",
    "device_copy_same_data": "a device copy of the same bytes",
    "host_copy_same_data": "a host copy of the same bytes",
    "raw_nccl_alltoall": "raw NCCL all-to-all",
    "cupy_pack_nccl_unpack": "CuPy pack+NCCL+unpack",
    "cupy_pack_staged_mpi_unpack": "CuPy pack+host MPI+unpack",
    "mpi_alltoallw_subarray": "MPI Alltoallw of subarrays (mpi4py-fft's method)",
    "numpy_pack_alltoallv_unpack": "NumPy pack+Alltoallv+unpack",
    "mpi4py_fft_transfer": "mpi4py-fft Pencil.transfer",
    "mpi4py_fft_pfft_slab": "mpi4py-fft PFFT (slab)",
    "mpi4py_fft_pfft_pencil": "mpi4py-fft PFFT (pencil)",
    "mpi4py_fft_pfft_fftw": "mpi4py-fft PFFT with FFTW",
    "pyfftw": "pyfftw (FFTW_MEASURE, one thread)",
    "scipy": "scipy.fft (one worker)",
    "numpy": "numpy.fft",
    "pyfftw_scipy_fft": "pyFFTW's interfaces.scipy_fft (one thread)",
    "fftw_r2r": "a planned FFTW r2r (FFTW_MEASURE, one thread)",
    "cupyx": "cupyx.scipy.fft on the whole array",
    "c2c_plan": "the same grid's complex FFT plan",
    "r2c_plan": "the same grid's r2c FFT plan",
    "cupy_fftn_1gpu": "cupy.fft on one GPU",
    "scipy_fftn_1rank": "scipy.fft on one rank",
    "numpy_fftn_1rank": "numpy.fft on one rank",
    "copy_floor": "copy floor",
    "eager_wall": "eager calls",
    "fft": "the whole forward FFT",
    "dissipation_peak_vs_reference": "dissipation-rate peak vs the reference DNS",
    "wall": "wall time with start-up",
    "own_files": "every rank's own file",
    "one_file_pwrite": "one pwrite per rank into one file",
    "transpose": "the transpose",
    "xy_then_yz": "X→Y then Y→Z transposes",
    "eager_xy_then_yz": "the eager X→Y and Y→Z calls",
    "mpi4py_fft": "mpi4py-fft Pencil.transfer",
    "alltoallw": "MPI Alltoallw of subarrays",
    "gather_scatter": "gather to rank 0 and scatter",
}


@dataclass(frozen=True)
class Run:
    """One invocation: when, of which code, where, on how many ranks, with which command."""

    date: str
    commit: str
    machine: str
    ranks: int
    command: str

    def launched(self) -> str:
        """Return the command with an MPI launcher for its ranks, after its leading ``NAME=value`` settings."""
        words = shlex.split(self.command)
        n = 0
        while n < len(words) and "=" in words[n] and not words[n].startswith("-"):
            n += 1
        launcher = ["mpirun", "-np", str(self.ranks)] if self.ranks > 1 else []
        return shlex.join(words[:n] + launcher + words[n:])


def check_file(path: str) -> str:
    """Why ``path`` cannot take records ("" when it can: a history file, or none yet in an existing directory)."""
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        return f"--record {path}: the directory does not exist"
    if os.path.exists(path):
        try:
            with open(path, newline="") as f:
                head = next(csv.reader(f), [])
        except (OSError, UnicodeDecodeError) as e:
            return f"--record {path}: cannot read it: {e}"
        if tuple(head) != FIELDS:
            return f"--record {path}: not a history file (its first line is not {','.join(FIELDS)})"
    return ""


def format_value(v: float | str) -> str:
    """Format a figure as the history stores it: numbers to 6 significant digits, text as it is."""
    return v if isinstance(v, str) else f"{v:.6g}"


def append(path: str, run: Run, records: Iterable[tuple[str, str, float | str]]) -> int:
    """Append ``(case, metric, value)`` records of ``run`` to the history file ``path``; how many."""
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    n = 0
    with open(path, "a", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        if new:
            w.writerow(FIELDS)
        for case, metric, value in records:
            w.writerow([run.date, run.commit, run.machine, run.ranks, run.command, case, metric, format_value(value)])
            n += 1
    return n


def read(path: str) -> list[dict[str, str]]:
    """Return the history file's lines as dicts keyed by ``FIELDS``, in file order."""
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        if tuple(r.fieldnames or ()) != FIELDS:
            raise ValueError(f"{path}: not a history file (its first line is not {','.join(FIELDS)})")
        return list(r)


def _run_of(line: Mapping[str, str]) -> Run:
    return Run(line["date"], line["commit"], line["machine"], int(line["ranks"]), line["command"])


def latest(history: Sequence[Mapping[str, str]], machine: str, case: str) -> tuple[Run, dict[str, str]] | None:
    """Return the newest run of ``case`` on ``machine`` (the last in the file) and its metrics, or None."""
    runs = [_run_of(h) for h in history if h["machine"] == machine and h["case"] == case]
    if not runs:
        return None
    run = runs[-1]
    metrics = {h["metric"]: h["value"] for h in history if h["case"] == case and _run_of(h) == run}
    return run, metrics


def ceilings(history: Sequence[Mapping[str, str]], run: Run) -> dict[str, float]:
    """Return the run-wide ceilings (GB/s) recorded by ``run``: case ``ceilings``, metrics ``<name>_gbps``."""
    return {h["metric"][:-5]: float(h["value"]) for h in history if h["case"] == "ceilings" and _run_of(h) == run}


def label(name: str) -> str:
    """Return what the page calls a ceiling or baseline."""
    return LABELS.get(name, name.replace("_", " "))


def fmt_ms(v: float) -> str:
    """Milliseconds in the unit that reads best: s, ms or µs."""
    if v >= 1000:
        return f"{v / 1e3:.4g} s"
    if v >= 1:
        return f"{v:.4g} ms"
    return f"{v * 1e3:.3g} µs"


def fmt_ratio(x: float) -> str:
    """Format a ratio of times (ours over the baseline's): three decimals near 1, significant digits far from it."""
    return f"{x:.3f}×" if 0.1 <= x < 10 else f"{x:.3g}×"


def _num(v: str) -> float | None:
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def figure_key(metrics: Mapping[str, str]) -> str:
    """Which metric is a run's headline figure for its case: its time (``ms``, ``ms_per_step``), else its first."""
    for key in ("ms", "ms_per_step"):
        if _num(metrics.get(key, "")) is not None:
            return key
    return next(iter(metrics), "")


def figure(metrics: Mapping[str, str]) -> str:
    """Format the headline figure of a case's run, as the page shows it."""
    key = figure_key(metrics)
    if not key:
        return "—"
    x = _num(metrics[key])
    if key in ("ms", "ms_per_step") and x is not None:
        return fmt_ms(x) + (" per step" if key == "ms_per_step" else "")
    return f"{label(key)} {metrics[key]}"


def compared(metrics: Mapping[str, str], ceils: Mapping[str, float]) -> str:
    """Format what the run compared the case with: ceilings (``pct_of_*``), baselines (``ratio_vs_*``, ``*_ms``), checks."""
    out: list[str] = []
    shown = {figure_key(metrics), "gbps_per_rank"}
    for k, v in metrics.items():
        x = _num(v)
        if k.startswith("pct_of_") and x is not None:
            if x < 1:  # a latency-bound case: its share of a copy's bandwidth says nothing
                continue
            name = k[len("pct_of_") :]
            c = f" ({ceils[name]:.0f} GB/s)" if name in ceils else ""
            out.append(f"{x:.1f} % of {label(name)}{c}")
        elif k.startswith("ratio_vs_") and x is not None:
            name = k[len("ratio_vs_") :]
            base = _num(metrics.get(f"{name}_ms", ""))
            out.append(f"{fmt_ratio(x)} {label(name)}" + (f" ({fmt_ms(base)})" if base is not None else ""))
            shown.add(f"{name}_ms")
    for k, v in metrics.items():
        if k in shown or k.startswith(("pct_of_", "ratio_vs_")):
            continue
        x = _num(v)
        if k.endswith("_ms") and x is not None:
            out.append(f"{label(k[:-3])} {fmt_ms(x)}")
        elif k.endswith("_pct") and x is not None:
            out.append(f"{label(k[:-4])} {x:+.2g} %")
        elif k.endswith("_s") and x is not None:
            out.append(f"{label(k[:-2])} {x:.4g} s")
        else:
            out.append(f"{label(k)} {v}")
    return "; ".join(out) or "—"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def render(keys: Sequence[tuple[str, str]], history: Sequence[Mapping[str, str]]) -> tuple[list[str], list[tuple[str, str]]]:
    """Return the lines of the figures block for the (machine, case) ``keys``, and the keys with no run in ``history``."""
    rows, runs, missing = [TABLE_HEAD, "| --- | --- | --- | --- | --- | --- | --- |"], [], []
    for machine, case in keys:
        found = latest(history, machine, case)
        if found is None:
            missing.append((machine, case))
            rows.append(f"| {machine} | `{case}` | not in the history | — | — | — | — |")
            continue
        run, metrics = found
        if run not in runs:
            runs.append(run)
        ref = f"R{runs.index(run) + 1}"
        cells = [machine, f"`{case}`", figure(metrics), compared(metrics, ceilings(history, run)), run.date, run.commit, ref]
        rows.append("| " + " | ".join(cells) + " |")
    lines = [BEGIN, *rows, "", "Runs (MPI launcher options left out):", ""]
    lines += [f"- R{i + 1}: `{r.launched()}`" for i, r in enumerate(runs)]
    return [*lines, END], missing


def update(page: str, history: Sequence[Mapping[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """``page`` with its figures block regenerated from ``history``, and the keys with no run there.

    The block's table rows name the (machine, case) keys (first two cells; the case may be
    in backticks); every other line of the block is regenerated.
    """
    lines = page.split("\n")
    try:
        b, e = lines.index(BEGIN), lines.index(END)
    except ValueError:
        raise ValueError(f"the page has no {BEGIN} ... {END} block") from None
    keys = []
    for line in lines[b + 1 : e]:
        if not line.startswith("|") or line.startswith(("| machine |", "| ---")):
            continue
        cells = _cells(line)
        keys.append((cells[0], cells[1].strip("`")))
    block, missing = render(keys, history)
    return "\n".join(lines[:b] + block + lines[e + 1 :]), missing


def newest_runs(history: Sequence[Mapping[str, str]]) -> list[tuple[str, str, Run]]:
    """(machine, case, newest run) of every case in ``history`` but the ceilings, sorted by machine and case."""
    last: dict[tuple[str, str], Run] = {}
    for h in history:
        if h["case"] != "ceilings":
            last[(h["machine"], h["case"])] = _run_of(h)
    return [(m, c, r) for (m, c), r in sorted(last.items())]


def parser() -> argparse.ArgumentParser:
    """Build the command-line parser of ``python -m cudecomp.bench.history``."""
    p = argparse.ArgumentParser(prog="python -m cudecomp.bench.history", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("history", help="the history file (CSV, as --record writes it)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--update", metavar="PAGE", help="rewrite the figures block of the Markdown page PAGE")
    g.add_argument("--check", metavar="PAGE", help="exit 1 if the figures block of PAGE is not what --update would write")
    g.add_argument("--list", action="store_true", help="print the newest run of every machine and case")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Update, check or list; 0 on success, 1 when a page names a case the history lacks or is out of date."""
    args = parser().parse_args(argv)
    try:
        history = read(args.history)
    except (OSError, ValueError) as e:
        print(f"python -m cudecomp.bench.history: error: {e}", file=sys.stderr)
        return 2
    if args.list:
        for machine, case, run in newest_runs(history):
            print(f"{machine} | {case} | {run.date} {run.commit}")
        return 0
    path = args.update or args.check
    try:
        with open(path) as f:
            page = f.read()
    except OSError as e:
        print(f"python -m cudecomp.bench.history: error: {path}: {e.strerror or e}", file=sys.stderr)
        return 2
    try:
        new, missing = update(page, history)
    except ValueError as e:
        print(f"python -m cudecomp.bench.history: error: {path}: {e}", file=sys.stderr)
        return 2
    for machine, case in missing:
        print(f"{path}: no run of {case!r} on {machine!r} in {args.history}", file=sys.stderr)
    if args.check:
        if new != page:
            print(f"{path} is out of date: run python -m cudecomp.bench.history {args.history} --update {path}", file=sys.stderr)
            return 1
        return 1 if missing else 0
    if new != page:
        try:
            with open(path, "w") as f:
                f.write(new)
        except OSError as e:
            print(f"python -m cudecomp.bench.history: error: {path}: {e.strerror or e}", file=sys.stderr)
            return 2
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
