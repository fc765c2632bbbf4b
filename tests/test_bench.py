"""Tests of the benchmark CLI on tiny sizes (no timing is asserted)."""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import json
import math
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_data_path
from cudecomp import bench
from oracle import nccl_usable

# The columns and JSON keys every earlier version wrote, in order: readers rely on them.
LEGACY_FIELDS = [
    "op",
    "gdims",
    "pdims",
    "backend",
    "dtype",
    "axis_contiguous",
    "halo",
    "ms",
    "ms_min",
    "gbps_per_rank",
    "bytes_off_rank",
    "ceiling_gbps",
    "pct_of_ceiling",
    "baseline",
    "note",
]

has_matplotlib = importlib.util.find_spec("matplotlib") is not None


def shared_dir(tmp: os.PathLike[str]) -> str:
    """Rank 0's temporary directory, on every rank (it is the one that writes)."""
    return MPI.COMM_WORLD.bcast(str(tmp) if MPI.COMM_WORLD.rank == 0 else None)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any] | None]:
    """One run over every process grid and CPU backend; on rank 0 its JSON rows, CSV path and whether ranks share a GPU."""
    comm = MPI.COMM_WORLD
    path = shared_dir(tmp_path_factory.mktemp("bench"))
    out, csv_path = os.path.join(path, "rows.json"), os.path.join(path, "rows.csv")
    args = ["--gdims", "8^3", "--dtypes", "f64", "--reps", "2", "--warmup", "1", "--quiet", "--autotune", "--json", out, "--csv", csv_path]
    assert bench.main(args) == 0
    comm.Barrier()
    shared_gpu = not cudecomp.CPU_ONLY and not nccl_usable()  # collective: every rank asks
    yield {"rows": json.load(open(out))["rows"], "csv": csv_path, "shared_gpu": shared_gpu} if comm.rank == 0 else None
    comm.Barrier()


@requires_data_path()
def test_bench_smoke(measured: dict[str, Any] | None) -> None:
    if measured is None:
        return
    rows = measured["rows"]
    ops = {r["op"] for r in rows if not r["note"]}
    assert {"xy", "yz", "zy", "yx", "halo"} <= ops
    assert all(r["ms"] > 0 for r in rows if not r["note"])
    assert open(measured["csv"]).readline().startswith("op,")
    tuned = [r for r in rows if r["op"] == "tune"]
    assert len(tuned) == 1 and tuned[0]["pdims"][0] * tuned[0]["pdims"][1] == MPI.COMM_WORLD.size
    assert tuned[0]["backend"] in {b.name for b in cudecomp.TransposeCommBackend}


@requires_data_path()
def test_json_and_csv_keep_every_earlier_field(measured: dict[str, Any] | None) -> None:
    if measured is None:
        return
    for r in measured["rows"]:
        assert list(r)[: len(LEGACY_FIELDS)] == LEGACY_FIELDS
        assert {"distributed", "ceiling", "bytes_per_rank"} <= set(r)
    with open(measured["csv"], newline="") as f:
        header = next(csv.reader(f))
    legacy = [k for k in LEGACY_FIELDS if k != "baseline"]
    assert header[: len(legacy)] == legacy
    assert {"distributed", "ceiling", "bytes_per_rank"} <= set(header)


def expected_distributed(op: str, pdims: list[int]) -> bool:
    """Whether bytes leave the rank: X<->Y exchange along pdims[0], Y<->Z along pdims[1]."""
    return {"xy": pdims[0], "yx": pdims[0], "yz": pdims[1], "zy": pdims[1], "hx": 1, "hy": pdims[0], "hz": pdims[1]}[op] > 1


@requires_data_path()
def test_each_percentage_uses_the_ceiling_of_its_kind(measured: dict[str, Any] | None) -> None:
    if measured is None:
        return
    rows = [r for r in measured["rows"] if not r["note"]]
    assert rows
    for r in rows:
        if r["op"] != "halo":
            assert r["distributed"] == expected_distributed(r["op"], r["pdims"]), r
        if r["distributed"]:
            # Bytes leave the rank: the run-wide copy bandwidth (one node here).
            assert r["bytes_off_rank"] > 0
            assert r["ceiling"] == ("host_copy" if cudecomp.CPU_ONLY else r["ceiling"])
            assert r["ceiling"] in {"host_copy", "device_copy", "peer_copy"}
            assert r["ceiling_gbps"] == r["baseline"][f"ceiling_{r['ceiling']}_gbps"]
        else:
            # Local: a copy of the same bytes, never the run-wide ceiling; none where ranks
            # share a GPU (their processes' copies take turns on it).
            assert r["bytes_off_rank"] == 0
            assert r["bytes_per_rank"] > 0
            if measured["shared_gpu"]:
                assert r["ceiling"] == "" and math.isnan(r["ceiling_gbps"]) and math.isnan(r["pct_of_ceiling"]), r
                continue
            assert r["ceiling"] in {"host_copy_same_data", "device_copy_same_data"}
        assert r["ceiling_gbps"] > 0
        assert math.isclose(r["pct_of_ceiling"], 100 * r["gbps_per_rank"] / r["ceiling_gbps"], rel_tol=1e-9)


@requires_data_path()
def test_baselines_only_beside_distributed_x_to_y(measured: dict[str, Any] | None) -> None:
    if measured is None:
        return
    rows = [r for r in measured["rows"] if not r["note"]]
    for r in rows:
        compared = {k for k in r["baseline"] if k.startswith("ratio_vs_") or k.endswith("_ms")}
        if r["op"] == "xy" and r["distributed"] and not r["axis_contiguous"]:
            assert compared, r
        else:
            assert not compared, r
    if MPI.COMM_WORLD.size > 1:
        assert any(r["op"] == "xy" and r["distributed"] for r in rows)
    # 1 x N: X->Y is local on every rank.
    assert not any(r["op"] == "xy" and r["pdims"][0] == 1 and r["distributed"] for r in rows)


@requires_data_path()
def test_graph_rows_time_replays_beside_eager_calls(tmp_path: os.PathLike[str]) -> None:
    """GPU: ``--graph`` adds an ``op-graph`` row per capturable row; DIRECT's distributed ones say why they were skipped."""
    if cudecomp.CPU_ONLY or not nccl_usable():
        pytest.skip("needs the GPU variant with one GPU per rank (NCCL)")
    path = os.path.join(shared_dir(tmp_path), "graph.json")
    argv = ["--gdims", "8^3", "--dtypes", "f64", "--ops", "xy", "yx", "halo", "--backends", "NCCL,DIRECT", "--graph", "6"]
    assert bench.main([*argv, "--reps", "2", "--warmup", "1", "--quiet", "--json", path]) == 0
    if MPI.COMM_WORLD.rank == 0:
        rows = json.load(open(path))["rows"]
        eager = [r for r in rows if not r["op"].endswith("-graph") and not r["note"]]
        graphs = {(r["op"], tuple(r["pdims"]), r["backend"]): r for r in rows if r["op"].endswith("-graph")}
        assert len(graphs) == len(eager)
        for r in eager:
            g = graphs[(r["op"] + "-graph", tuple(r["pdims"]), r["backend"])]
            # DIRECT's exchanges are refused; what stays within the rank is captured.
            if r["backend"] == "DIRECT" and r["distributed"]:
                assert g["note"].startswith("graph skipped: NotSupportedError"), g
            else:
                assert not g["note"] and g["ms"] > 0, g
                assert all(g["baseline"][k] > 0 for k in ("eager_wall_ms", "eager_host_ms", "replay_host_ms")), g
                assert math.isclose(g["baseline"]["ratio_vs_eager_wall"], g["ms"] / g["baseline"]["eager_wall_ms"], rel_tol=1e-9)
    MPI.COMM_WORLD.Barrier()


@requires_data_path()
def test_fft_op_times_forward_and_backward_beside_one_device(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(shared_dir(tmp_path), "fft.json")
    argv = ["--gdims", "8^3", "--dtypes", "f64", "c64", "--ops", "fft", "--fft-out", "both", "--fft-norm", "ortho", "--backends", "MPI_P2P"]
    assert bench.main([*argv, "--reps", "2", "--warmup", "1", "--quiet", "--json", path]) == 0
    if MPI.COMM_WORLD.rank == 0:
        rows = json.load(open(path))["rows"]
        measured = [r for r in rows if not r["note"]]
        assert {r["op"] for r in measured} == {"fft", "ifft", "fft-natural", "ifft-natural"}
        assert {r["dtype"] for r in measured} == {"f64", "c64"}
        grids = {tuple(r["pdims"]) for r in rows}
        assert grids == {(r, MPI.COMM_WORLD.size // r) for r in range(1, MPI.COMM_WORLD.size + 1) if MPI.COMM_WORLD.size % r == 0}
        one = "cupy_fftn_1gpu" if not cudecomp.CPU_ONLY else None
        for r in measured:
            assert r["ms"] > 0 and r["distributed"] == (MPI.COMM_WORLD.size > 1)
            (name,) = [k[:-3] for k in r["baseline"] if k.endswith("_fftn_1rank_ms") or k.endswith("_fftn_1gpu_ms")]
            assert one is None or name == one
            assert math.isclose(r["baseline"][f"ratio_vs_{name}"], r["ms"] / r["baseline"][f"{name}_ms"], rel_tol=1e-9)
        # A grid that leaves a pencil empty (8^3 r2c has 5 kx modes) gives a skipped row, not a failure.
        for r in rows:
            if r["note"]:
                assert r["op"] in ("fft", "fft-natural") and r["note"].startswith("skipped: NotSupportedError"), r
        skipped = [(r["op"], tuple(r["pdims"]), r["dtype"], r["backend"]) for r in rows if r["note"]]
        assert len(set(skipped)) == len(skipped), skipped  # natural and transposed rows keep their names
    MPI.COMM_WORLD.Barrier()


@requires_data_path()
def test_library_arrays_run_single_copies(tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``--alloc library`` times transposes between ``empty_pencil`` arrays (single copies with DIRECT)."""
    monkeypatch.setenv("CUDECOMP_SHARED_ARRAY_MIN_BYTES", "0")
    monkeypatch.setenv("CUDECOMP_SINGLE_COPY", "1")  # opt-in on GPUs
    path = os.path.join(shared_dir(tmp_path), "alloc.json")
    before = cudecomp._cudecomp._single_copy_count()
    argv = ["--gdims", "12^3", "--dtypes", "f64", "--ops", "xy", "yz", "--backends", "DIRECT", "--alloc", "library"]
    assert bench.main([*argv, "--reps", "2", "--warmup", "1", "--no-baselines", "--quiet", "--json", path]) == 0
    ran = cudecomp._cudecomp._single_copy_count() - before
    if MPI.COMM_WORLD.rank == 0:
        rows = [r for r in json.load(open(path))["rows"] if not r["note"]]
        assert rows and all(r["ms"] > 0 for r in rows)
        # Every distributed row ran as single copies (warm-up and timed calls).
        distributed = sum(r["distributed"] for r in rows)
        assert (ran > 0) == (distributed > 0), (ran, distributed)
    MPI.COMM_WORLD.Barrier()


def test_every_option_has_help_showing_its_default() -> None:
    p = bench.parser()
    for a in p._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        assert a.help and "(default: " in a.help, a.option_strings
        if isinstance(a.default, str | int) and not isinstance(a.default, bool):
            assert f"(default: {a.default})" in a.help, a.option_strings
    assert "(default:" in p.format_help()


@pytest.mark.parametrize("argv", [["--backends", "NOPE"], ["--gdims", "0^3"], ["--gdims", "4,4"], ["--dtypes", "f16"]])
def test_bad_arguments_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        bench.parser().parse_args(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


@requires_data_path()
def test_plot_without_matplotlib_fails_before_measuring(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError

    def no_run(args: argparse.Namespace) -> list[bench.Row]:
        raise AssertionError("measured before checking --plot")

    monkeypatch.setattr(bench._cli, "run", no_run)  # main looks run up in its own module
    with pytest.raises(SystemExit) as e:  # on every rank
        bench.main(["--plot", os.path.join(shared_dir(tmp_path), "plots"), "--quiet"])
    assert e.value.code not in (0, None)
    assert "--plot needs matplotlib" in str(e.value.code)


@requires_data_path()
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--progress", "bar"], "--progress bar needs tqdm"),
        (["--pdims", "3x7"], "no process grid"),
        (["--json", "/nonexistent-dir/rows.json"], "does not exist"),
        (["--graph", "-1"], "--graph must be >= 0"),
        pytest.param(
            ["--graph", "4"],
            "--graph needs the GPU variant",
            marks=pytest.mark.skipif(not cudecomp.CPU_ONLY, reason="the CPU variant refuses --graph"),
        ),
    ],
)
def test_other_problems_fail_before_measuring(argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)

    def no_run(args: argparse.Namespace) -> list[bench.Row]:
        raise AssertionError("measured before checking the arguments")

    monkeypatch.setattr(bench._cli, "run", no_run)  # main looks run up in its own module
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert message in str(e.value.code)


class FakeBar:
    """Stands in for tqdm.tqdm and records its calls."""

    made: list[FakeBar] = []

    def __init__(self, total: int, file: Any, **kw: Any) -> None:
        self.total, self.file, self.updates, self.closed = total, file, 0, False
        self.postfix: list[str] = []
        FakeBar.made.append(self)

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        self.postfix.append(s)

    def update(self, n: int) -> None:
        self.updates += n

    def close(self) -> None:
        self.closed = True


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def drive(p: bench.Progress, n: int) -> None:
    for i in range(n):
        p.start(f"config {i}")
        p.done()
    p.close()


def test_progress_uses_tqdm_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeBar))
    FakeBar.made.clear()
    tty = Terminal()
    drive(bench.Progress(3, "auto", stream=tty), 3)
    assert len(FakeBar.made) == 1 and FakeBar.made[0].file is tty
    assert FakeBar.made[0].updates == 3 and FakeBar.made[0].closed and FakeBar.made[0].postfix[-1] == "config 2"
    # A file or pipe, or a rank other than 0: no bar, nothing written.
    pipe = io.StringIO()
    drive(bench.Progress(3, "auto", stream=pipe), 3)
    drive(bench.Progress(3, "auto", enabled=False, stream=tty), 3)
    assert len(FakeBar.made) == 1 and pipe.getvalue() == "" and tty.getvalue() == ""
    # Asked for explicitly, a bar even into a pipe (mpiexec's ranks write into pipes).
    drive(bench.Progress(3, "bar", stream=pipe), 3)
    assert len(FakeBar.made) == 2 and FakeBar.made[1].file is pipe


def test_progress_without_tqdm_or_as_lines_writes_no_carriage_return(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)
    tty = Terminal()
    drive(bench.Progress(2, "auto", stream=tty), 2)
    assert tty.getvalue() == ""
    with pytest.raises(RuntimeError, match="needs tqdm"):
        bench.Progress(2, "bar", stream=tty)
    log = io.StringIO()
    drive(bench.Progress(2, "lines", stream=log), 2)
    assert log.getvalue() == "[1/2] config 0\n[2/2] config 1\n"
    drive(bench.Progress(2, "off", stream=tty), 2)
    assert tty.getvalue() == ""


@requires_data_path()
def test_cli_writes_no_progress_bar_into_a_pipe(capfd: pytest.CaptureFixture[str]) -> None:
    argv = ["--gdims", "8^3", "--dtypes", "f64", "--backends", "MPI_P2P", "--ops", "xy", "--reps", "1", "--warmup", "0"]
    assert bench.main([*argv, "--no-baselines"]) == 0
    out, err = capfd.readouterr()
    assert "\r" not in err and "\r" not in out
    if MPI.COMM_WORLD.rank == 0:
        assert "xy" in out


def test_text_colour_follows_cell_luminance() -> None:
    assert bench.text_colour((0.267, 0.005, 0.329, 1.0)) == "white"  # viridis, low end
    assert bench.text_colour((0.993, 0.906, 0.144, 1.0)) == "black"  # viridis, high end
    assert bench.text_colour((0.128, 0.567, 0.551, 1.0)) == "black"  # viridis, middle (teal)
    assert bench.text_colour((0.0, 0.0, 0.0)) == "white"
    assert bench.text_colour((1.0, 1.0, 1.0)) == "black"


@requires_data_path()
@pytest.mark.skipif(not has_matplotlib, reason="needs matplotlib")
def test_plot_renders_heatmaps_and_small_multiples(tmp_path: os.PathLike[str]) -> None:
    outdir = os.path.join(shared_dir(tmp_path), "plots")
    argv = ["--gdims", "8^3", "12^3", "--dtypes", "f64", "--backends", "MPI_P2P,DIRECT", "--ops", "xy", "yz", "halo"]
    assert bench.main([*argv, "--reps", "1", "--warmup", "0", "--quiet", "--no-baselines", "--plot", outdir]) == 0
    if MPI.COMM_WORLD.rank == 0:
        names = set(os.listdir(outdir))
        expected = {"bandwidth-vs-size.png", "bandwidth-vs-size-halo.png", "heatmap-xy-8x8x8.png", "heatmap-yz-12x12x12.png"}
        expected |= {"heatmap-halo-8x8x8.png"}
        assert expected <= names
        for name in names:
            with open(os.path.join(outdir, name), "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    MPI.COMM_WORLD.Barrier()


def test_work_on_rank_0_alone_fails_on_every_rank() -> None:
    """What rank 0 measures alone (ceilings, the one-device FFT) reaches every rank, and so does its failure."""
    from cudecomp.bench._measure import on_root

    comm = MPI.COMM_WORLD

    def fails() -> int:
        raise ValueError("no room for the whole array")

    with pytest.raises(ValueError if comm.rank == 0 else RuntimeError, match="no room for the whole array"):
        on_root(comm, fails)
    assert on_root(comm, lambda: comm.rank + 42) == 42
