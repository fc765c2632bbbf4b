"""The outputs: the printed table, JSON and CSV files, PNG heatmaps and bandwidth plots."""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, fields
from typing import Any

import numpy as np
from mpi4py import MPI

import cudecomp

from ._common import CEILING_TAGS, FFT_OPS, HALO_OPS, OP_TITLES, OPS, Row


def report(rows: Sequence[Row]) -> None:
    """Print the table (rank 0)."""
    w = max([5] + [len(r.op) + 1 for r in rows])
    head = f"{'op':<{w}}{'gdims':<16}{'pdims':<7}{'backend':<13}{'dtype':<6}{'ac':<3}"
    print(f"{head}{'ms':>10}{'GB/s/rank':>11}{'%ceil':>7}  {'ceiling':<10}baselines (ms; ours/baseline)")
    for r in rows:
        key = f"{r.op:<{w}}{'x'.join(map(str, r.gdims)):<16}{'x'.join(map(str, r.pdims)):<7}{r.backend:<13}{r.dtype:<6}"
        key += f"{int(r.axis_contiguous):<3}"
        if r.note:
            print(f"{key}  {r.note}")
            continue
        extra = ", ".join(f"{k}={v:.3g}" for k, v in r.baseline.items() if not k.startswith("ceiling"))
        pct = f"{r.pct_of_ceiling:>7.1f}" if math.isfinite(r.pct_of_ceiling) else f"{'-':>7}"
        tag = CEILING_TAGS.get(r.ceiling, r.ceiling or "-")
        gbps = f"{r.gbps_per_rank:>11.2f}" if math.isfinite(r.gbps_per_rank) else f"{'-':>11}"
        print(f"{key}{r.ms:>10.3f}{gbps}{pct}  {tag:<10}{extra}".rstrip())
    ceil = {k: v for k, v in (rows[0].baseline.items() if rows else []) if k.startswith("ceiling")}
    print("ceilings (GB/s): " + ", ".join(f"{k[8:-5]}={v:.1f}" for k, v in ceil.items()))
    print("%ceil: distributed rows (bytes leave the rank) against the run-wide copy bandwidth above (peer, dev or host;")
    print("       '-' when the ranks span several nodes); local rows (nothing leaves the rank) against a copy of the")
    ffts = any(r.op.split("-")[0] in FFT_OPS for r in rows)
    end = "," if ffts else "."
    print("       same bytes on every rank at once (dev-same, host-same; '-' where ranks share a GPU, whose processes'")
    print(f"       copies take turns on it). Baselines: beside distributed X->Y rows only{end}")
    if ffts:
        print("       and beside fft/ifft rows the same transform of the whole array on one device (rank 0's GPU or CPU).")
    if any(r.op.startswith("rd-") for r in rows):
        print("rd-* rows: redistributions (rd-xz: transpose_x_to_z) beside the same move by transposes, mpi4py-fft,")
        print("       MPI_Alltoallw with subarray types and a gather to rank 0 then a scatter (baselines, same run).")
    if any(r.op.startswith("io-") for r in rows):
        print("io-* rows: one-file write/read of cudecomp.io; ceiling own_files: every rank writing (reading) its own")
        print("       file of the same bytes from host memory, same run, same directory.")
    if any(r.op.endswith("-graph") for r in rows):
        print("op-graph rows: wall clock per operation of a CUDA graph's replay; eager_wall_ms: the same operations called")
        print("       eagerly back to back, wall clock per operation; *_host_ms: the host's share (the calls, or the launch).")


def write(rows: Sequence[Row], args: argparse.Namespace) -> None:
    """Write JSON and CSV files (rank 0)."""
    meta = {
        "cudecomp": cudecomp.__version__,
        "cpu_only": cudecomp.CPU_ONLY,
        "ranks": MPI.COMM_WORLD.size,
        "host": platform.node(),
        "argv": sys.argv,
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": [asdict(r) for r in rows]}, f, indent=1)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            # The original columns (op .. note), then the baselines, then fields added
            # later: existing columns keep their places.
            names = [f.name for f in fields(Row)]
            keys = [k for k in names[: names.index("note") + 1] if k != "baseline"]
            added = names[names.index("note") + 1 :]
            bkeys = sorted({k for r in rows for k in r.baseline})
            w.writerow(keys + bkeys + added)
            for r in rows:
                d = asdict(r)
                w.writerow([d[k] for k in keys] + [r.baseline.get(k, "") for k in bkeys] + [d[k] for k in added])


def text_colour(rgba: Sequence[float] | np.ndarray) -> str:
    """``"black"`` or ``"white"``: the text colour that contrasts more with a cell of colour ``rgba``.

    From the cell's WCAG relative luminance ``L`` (linearised sRGB): black text has the
    higher contrast ratio exactly when ``L > 0.179``.
    """

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(float(c)) for c in rgba[:3])
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.179 else "white"


def _cells(rows: Sequence[Row]) -> dict[tuple[Any, ...], tuple[float, float, bool]]:
    """(op, gdims, pdims, backend, dtype, ac) -> (GB/s, % of ceiling, distributed), averaged over repeats.

    Halo rows repeat when several transpose backends share a halo backend (MPI_P2P and
    MPI_A2A both use MPI).
    """
    acc: dict[tuple[Any, ...], list[Row]] = {}
    for r in rows:
        if not r.note and math.isfinite(r.gbps_per_rank):
            acc.setdefault((r.op, tuple(r.gdims), tuple(r.pdims), r.backend, r.dtype, bool(r.axis_contiguous)), []).append(r)
    out = {}
    for k, rs in acc.items():
        pcts = [r.pct_of_ceiling for r in rs if math.isfinite(r.pct_of_ceiling)]
        out[k] = (float(np.mean([r.gbps_per_rank for r in rs])), float(np.mean(pcts)) if pcts else math.nan, rs[0].distributed)
    return out


def _label(dims: Sequence[int]) -> str:
    return "x".join(map(str, dims))


def _pct_text(p: float) -> str:
    return f"{p:.0f} %" if p >= 10 else f"{p:.2g} %"


def plot(rows: Sequence[Row], outdir: str) -> list[str]:
    """Render ``heatmap-<op>-<grid>.png`` and the bandwidth-versus-size PNGs into ``outdir``; their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(outdir, exist_ok=True)
    cells = _cells(rows)
    written: list[str] = []
    ops = [op for op in (*OPS, *HALO_OPS) if any(k[0] == op for k in cells)]
    for op in ops:
        for gd in sorted({k[1] for k in cells if k[0] == op}):
            sel = {k: v for k, v in cells.items() if k[0] == op and k[1] == gd}
            grids = sorted({k[2] for k in sel})
            backs = sorted({k[3:] for k in sel})
            m = np.full((len(backs), len(grids)), np.nan)
            pct = np.full_like(m, np.nan)
            for k, (gbps, p, _) in sel.items():
                m[backs.index(k[3:]), grids.index(k[2])], pct[backs.index(k[3:]), grids.index(k[2])] = gbps, p
            fig, ax = plt.subplots(figsize=(2.4 + 1.1 * len(grids), 1.3 + 0.42 * len(backs)), layout="constrained")
            finite = m[np.isfinite(m) & (m > 0)]
            norm: Any = None
            if finite.size and finite.max() / finite.min() > 20:
                norm = matplotlib.colors.LogNorm(finite.min(), finite.max())
            cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.85")
            im = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, norm=norm, aspect="auto")
            local = {g for g in grids if not any(v[2] for k, v in sel.items() if k[2] == g)}
            ax.set_xticks(range(len(grids)), [_label(g) + ("\n(local)" if g in local else "") for g in grids])
            ax.set_yticks(range(len(backs)), [f"{b} {d} ac{int(ac)}" for b, d, ac in backs])
            ax.set_xlabel("process grid")
            for i in range(len(backs)):
                for j in range(len(grids)):
                    if not np.isfinite(m[i, j]):
                        ax.text(j, i, "n/a", ha="center", va="center", color="black", fontsize=8)
                        continue
                    txt = f"{m[i, j]:.3g}" + (f"\n{_pct_text(pct[i, j])}" if np.isfinite(pct[i, j]) else "")
                    ax.text(j, i, txt, ha="center", va="center", color=text_colour(im.cmap(im.norm(m[i, j]))), fontsize=8)
            ax.set_title(f"{OP_TITLES.get(op, op)} {_label(gd)}: GB/s per rank (% of ceiling)", fontsize=10)
            fig.colorbar(im, ax=ax, label="GB/s per rank")
            path = os.path.join(outdir, f"heatmap-{op}-{_label(gd)}.png")
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    for family, name, title in ((OPS, "bandwidth-vs-size.png", "transposes"), (HALO_OPS, "bandwidth-vs-size-halo.png", "halo updates")):
        fam = [op for op in ops if op in family]
        if fam:
            path = os.path.join(outdir, name)
            _size_panels(plt, {k: v for k, v in cells.items() if k[0] in fam}, fam, title, path)
            written.append(path)
    return written


def _size_panels(plt: Any, cells: dict[tuple[Any, ...], tuple[float, float, bool]], ops: list[str], title: str, path: str) -> None:
    """Small multiples: one panel per operation (rows) and backend (columns), GB/s per rank versus grid points.

    Colour: process grid; line style: dtype and layout; hollow markers: local points (no
    byte leaves the rank). One short legend outside the panels.
    """
    from matplotlib.lines import Line2D

    backends = list(dict.fromkeys(k[3] for k in cells))  # in the order measured
    grids = sorted({k[2] for k in cells})
    variants = sorted({k[4:] for k in cells})
    colours = [plt.get_cmap("tab10")(i % 10) for i in range(len(grids))]
    styles: list[Any] = ["-", "--", ":", "-."]
    nr, nc = len(ops), len(backends)
    fig, axes = plt.subplots(
        nr, nc, figsize=(2.3 + 2.5 * nc, 1.0 + 2.0 * nr), sharex=True, sharey=True, squeeze=False, layout="constrained"
    )
    for i, op in enumerate(ops):
        for j, backend in enumerate(backends):
            ax = axes[i][j]
            drawn = False
            for gi, pd in enumerate(grids):
                for vi, var in enumerate(variants):
                    pts = sorted(
                        (math.prod(k[1]), v) for k, v in cells.items() if k[0] == op and k[2] == pd and k[3] == backend and k[4:] == var
                    )
                    pts = [(x, v) for x, v in pts if v[0] > 0]
                    if not pts:
                        continue
                    xs, ys = [x for x, _ in pts], [v[0] for _, v in pts]
                    ax.plot(xs, ys, color=colours[gi], linestyle=styles[vi % len(styles)], linewidth=1.2)
                    for x, (y, _, dist) in pts:
                        ax.plot([x], [y], marker="o", markersize=4.5, color=colours[gi], markerfacecolor=colours[gi] if dist else "white")
                    drawn = True
            if not drawn:
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.5", fontsize=8)
            if i == 0:
                ax.set_title(backend, fontsize=10)
            if j == 0:
                ax.set_ylabel(f"{OP_TITLES.get(op, op)}\nGB/s per rank", fontsize=9)
            if i == nr - 1:
                ax.set_xlabel("grid points", fontsize=9)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="major", alpha=0.3)
            ax.tick_params(labelsize=8)
    blank = Line2D([], [], linestyle="none")
    handles: list[Any] = [blank] + [Line2D([], [], color=c, linewidth=2) for c in colours]
    labels = ["process grid"] + [_label(g) for g in grids]
    handles += [blank] + [Line2D([], [], color="0.3", linestyle=styles[v % len(styles)]) for v in range(len(variants))]
    labels += ["dtype, layout"] + [f"{d} ac{int(ac)}" for d, ac in variants]
    handles += [
        blank,
        Line2D([], [], linestyle="none", marker="o", color="0.3"),
        Line2D([], [], linestyle="none", marker="o", color="0.3", markerfacecolor="white"),
    ]
    labels += ["marker", "distributed", "local"]
    leg = fig.legend(handles, labels, loc="outside right upper", fontsize=8, frameon=False, handlelength=2.2)
    for text in leg.get_texts():
        if text.get_text() in ("process grid", "dtype, layout", "marker"):
            text.set_fontweight("bold")
    fig.suptitle(f"Bandwidth per rank versus grid size: {title}", fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)
