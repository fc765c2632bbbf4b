"""Tests of the benchmark CLI on tiny sizes (no timing is asserted)."""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import json
import math
import os
import shlex
import subprocess
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_cpu_variant, requires_data_path
from cudecomp import bench
from cudecomp.bench import _fft_local, history
from cudecomp.fft import schedule_of
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

# Runs of the CLI whose rows depend on the rank count (process grids, empty pencils, work
# on rank 0 alone): one rank, a pair, and four (a 2x2 grid). The exchanges themselves are
# the engine suites' to check at every rank count.
collective = pytest.mark.mpi(ranks=(1, 2, 4))


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


@collective
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


@collective
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


@collective
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


@collective
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


@collective
@requires_data_path()
def test_batched_graph_rows_stand_beside_one_field_replays(tmp_path: os.PathLike[str]) -> None:
    """GPU: ``--graph`` with ``--fields 3`` captures batched operations, beside the replay of one field's graph."""
    if cudecomp.CPU_ONLY or not nccl_usable():
        pytest.skip("needs the GPU variant with one GPU per rank (NCCL)")
    path = os.path.join(shared_dir(tmp_path), "graph-fields.json")
    argv = ["--gdims", "8^3", "--dtypes", "c128", "--ops", "xy", "halo", "--backends", "NCCL", "--graph", "6", "--fields", "3"]
    assert bench.main([*argv, "--reps", "2", "--warmup", "1", "--no-baselines", "--quiet", "--json", path]) == 0
    if MPI.COMM_WORLD.rank == 0:
        graphs = [r for r in json.load(open(path))["rows"] if r["op"].endswith("-graph")]
        assert graphs and all(not g["note"] for g in graphs), graphs
        for g in graphs:
            assert math.isclose(g["baseline"]["ratio_vs_single_replay"], g["ms"] / g["baseline"]["single_replay_ms"], rel_tol=1e-9)
    MPI.COMM_WORLD.Barrier()


@collective
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


@collective
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


@collective
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


@collective
@requires_data_path()
@pytest.mark.parametrize("alloc", ["user", "library"])
def test_fields_time_a_batch_beside_separate_calls_and_the_bound(
    alloc: str, tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--fields 3`` rows time one batched exchange beside three calls and the grid three times longer."""
    monkeypatch.setenv("CUDECOMP_SHARED_ARRAY_MIN_BYTES", "0")
    monkeypatch.setenv("CUDECOMP_SINGLE_COPY", "1")
    path = os.path.join(shared_dir(tmp_path), f"fields-{alloc}.json")
    before = cudecomp._cudecomp._single_copy_count()
    argv = ["--gdims", "8^3", "--dtypes", "f64", "--ops", "xy", "halo", "--backends", "DIRECT", "--fields", "3", "--alloc", alloc]
    assert bench.main([*argv, "--reps", "2", "--warmup", "1", "--no-baselines", "--quiet", "--json", path]) == 0
    ran = cudecomp._cudecomp._single_copy_count() - before
    if MPI.COMM_WORLD.rank == 0:
        rows = [r for r in json.load(open(path))["rows"] if not r["note"]]
        assert rows
        assert {r["op"] for r in rows} >= {"xy", "halo"}, rows
        for r in rows:
            assert r["baseline"]["separate_calls_ms"] > 0, r
            assert r["op"] != "xy" or r["baseline"]["one_exchange_bound_ms"] > 0, r
        if alloc == "library" and cudecomp.CPU_ONLY:
            assert (ran > 0) == any(r["distributed"] for r in rows), ran
    MPI.COMM_WORLD.Barrier()


@pytest.mark.mpi(ranks=(1, 2))  # the rows' code is one at every count; tests/test_jax.py takes 4 ranks
@requires_data_path()
def test_jax_rows_stand_beside_the_eager_ones(tmp_path: os.PathLike[str]) -> None:
    """``--jax`` rows time the jitted transposes and FFTs beside the eager calls of the same run."""
    pytest.importorskip("jax")
    path = os.path.join(shared_dir(tmp_path), "jax.json")
    argv = ["--gdims", "8^3", "--dtypes", "f64", "c64", "--ops", "xy", "yz", "fft", "--backends", "MPI_P2P", "--jax"]
    assert bench.main([*argv, "--reps", "2", "--warmup", "1", "--no-baselines", "--quiet", "--json", path]) == 0
    if MPI.COMM_WORLD.rank == 0:
        rows = [r for r in json.load(open(path))["rows"] if not r["note"]]
        jitted = [r for r in rows if r["op"].endswith("-jax") and r["op"] != "xyz-jax"]
        eager = [r for r in rows if r["op"] in ("xy", "yz", "fft", "ifft")]
        assert eager and len(jitted) == len(eager), jitted
        # Each beside the eager call as timed in its row, and waited for as the jitted one is.
        assert all(r["ms"] > 0 and min(r["baseline"]["eager_ms"], r["baseline"]["eager_waited_ms"]) > 0 for r in jitted), jitted
        # One program of X->Y and Y->Z beside each pair of eager calls.
        chained = [r for r in rows if r["op"] == "xyz-jax"]
        assert len(chained) == len([r for r in eager if r["op"] == "xy"]), chained
        waited = [min(r["baseline"]["eager_xy_then_yz_ms"], r["baseline"]["eager_waited_ms"]) for r in chained]
        assert all(r["ms"] > 0 for r in chained) and min(waited) > 0, chained
        # And that program called back to back beside the eager steps made as often.
        looped = [r for r in rows if r["op"] == "xyz-jax-loop"]
        assert len(looped) == len(chained) and all(r["ms"] > 0 and r["baseline"]["eager_loop_ms"] > 0 for r in looped), looped
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


@pytest.mark.parametrize(
    "argv",
    [
        ["--backends", "NOPE"],
        ["--gdims", "0^3"],
        ["--gdims", "4,4"],
        ["--dtypes", "f16"],
        ["--gdims", "99999999999^3"],
        ["--pdims", "banana"],
    ],
)
def test_bad_arguments_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        bench.parser().parse_args(argv)
    assert e.value.code == 2
    assert ("error" in capsys.readouterr().err) == (MPI.COMM_WORLD.rank == 0)  # once per job, by rank 0


@requires_data_path()
def test_plot_without_matplotlib_fails_before_measuring(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError

    def no_run(args: argparse.Namespace) -> list[bench.Row]:
        raise AssertionError("measured before checking --plot")

    monkeypatch.setattr(bench._cli, "run", no_run)  # main looks run up in its own module
    with pytest.raises(SystemExit) as e:  # on every rank
        bench.main(["--plot", os.path.join(shared_dir(tmp_path), "plots"), "--quiet"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert ("--plot needs matplotlib" in err) == (MPI.COMM_WORLD.rank == 0)  # written once, by rank 0


@requires_data_path()
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--progress", "bar"], "--progress bar needs tqdm"),
        (["--pdims", "3x7"], "no process grid"),
        (["--json", "/nonexistent-dir/rows.json"], "does not exist"),
        (["--csv", "/"], "--csv /: is a directory"),
        (["--record", "/nonexistent-dir/history.csv"], "does not exist"),
        (["--machine", "box"], "give --record FILE too"),
        (["--fft-stages"], "add fft to --ops"),
        (["--fft-compare", "local", "--fft-transforms", "dct5"], "--fft-transforms 'dct5': expected one name or three"),
        (["--fft-compare", "local", "--fft-transforms", "fft,dct2"], "--fft-transforms 'fft,dct2': expected one name or three"),
        (["--ops", "fft", "--fft-out", "natural", "--fft-stages"], "use --fft-out transposed or both"),
        (["--graph", "-1"], "argument --graph: invalid value '-1'"),
        (["--reps", "0"], "argument --reps: invalid value '0'"),
        (["--warmup", "x"], "argument --warmup: invalid value 'x'"),
        (["--halo", "-1", "0", "0"], "argument --halo: invalid value '-1': expected an integer >= 0"),
        pytest.param(
            ["--graph", "4"],
            "--graph needs the GPU variant",
            marks=pytest.mark.skipif(not cudecomp.CPU_ONLY, reason="the CPU variant refuses --graph"),
        ),
    ],
)
def test_other_problems_fail_before_measuring(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)

    def no_run(args: argparse.Namespace) -> list[bench.Row]:
        raise AssertionError("measured before checking the arguments")

    monkeypatch.setattr(bench._cli, "run", no_run)  # main looks run up in its own module
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert e.value.code == 2  # as argparse's own usage errors
    err = capsys.readouterr().err
    if MPI.COMM_WORLD.rank == 0:
        last = err.strip().splitlines()[-1]
        assert err.startswith("usage: python -m cudecomp.bench") and last.startswith("python -m cudecomp.bench: error: "), err
        assert message in last, err
    else:
        assert err == ""


def test_a_file_that_is_no_history_is_refused(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "notes.csv")
    with open(path, "w") as f:
        f.write("a,b\n1,2\n")
    assert "not a history file" in history.check_file(path)
    assert history.check_file(os.path.join(str(tmp_path), "new.csv")) == ""


def cli(*argv: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run ``python -m cudecomp.bench`` in a fresh process (a singleton MPI job), outside any MPI job's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPI_LOCALNRANKS"))}
    cmd = [sys.executable, "-m", "cudecomp.bench", *argv, "--reps", "1", "--warmup", "0", "--quiet"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def _singleton_mpi_starts() -> bool:
    """Whether a fresh process can start MPI on its own (a singleton): Open MPI needs a
    launcher agent for that, which some containers lack."""
    if MPI.COMM_WORLD.size > 1:
        return False
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPI_LOCALNRANKS"))}
    probe = [sys.executable, "-c", "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"]
    return subprocess.run(probe, capture_output=True, timeout=120, env=env, check=False).returncode == 0


serial_only = pytest.mark.skipif(
    not _singleton_mpi_starts(), reason="runs the CLI in a process of its own (the serial suite does), where MPI can start alone"
)


@pytest.mark.slow
@serial_only
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--halo", "-1", "0", "0"], "argument --halo: invalid value '-1': expected an integer >= 0"),
        (["--halo", "1", "1"], "argument --halo: expected 3 arguments"),
        (["--reps", "0"], "argument --reps: invalid value '0': expected an integer >= 1"),
        (["--pdims", "2x2"], "--pdims 2x2: no process grid of 1 ranks"),
        (["--gdims", "3,2"], "invalid grid '3,2'"),
        (["--fft-stages"], "--fft-stages times the stages of --ops fft"),
    ],
)
def test_cli_usage_errors_exit_2_with_one_line(argv: list[str], message: str) -> None:
    r = cli(*argv)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and r.stdout == ""
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m cudecomp.bench: error: ") and message in last, r.stderr


@pytest.mark.slow
@serial_only
@requires_data_path()
def test_cli_skips_halo_rows_whose_extent_exceeds_a_ranks_cells() -> None:
    r = cli("--gdims", "8^3", "--dtypes", "f64", "--backends", "MPI_P2P", "--ops", "xy", "halo", "--halo", "9", "1", "1")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    ops = ("xy", "halo", "hx", "hy", "hz")
    lines = {line.split()[0]: line for line in r.stdout.splitlines() if line.split() and line.split()[0] in ops}
    assert "skipped: InvalidUsageError: halo_extents[0] = 9 exceeds the 8 cells" in lines["halo"]
    assert "skipped: InvalidUsageError: halo_extents[0] = 9" in lines["hx"]
    assert "skipped" not in lines["hy"] and "skipped" not in lines["hz"] and "skipped" not in lines["xy"]


@pytest.mark.slow
@serial_only
@requires_data_path()
def test_cli_runs_grids_thinner_than_the_ranks_default_ops() -> None:
    """A 3x2x1 grid on one rank has no empty pencil: every default operation runs."""
    r = cli("--gdims", "3,2,1", "--dtypes", "f64", "--backends", "MPI_P2P,DIRECT")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "skipped" not in r.stdout and r.stdout.count("3x2x1") >= 10


def has_empty_pencil(gdims: tuple[int, int, int], pdims: tuple[int, int]) -> bool:
    """Whether some rank owns no cells of a pencil: X-pencils split (y, z), Y-pencils (x, z), Z-pencils (x, y) over (rows, columns)."""
    x, y, z = gdims
    r, c = pdims
    return y < r or z < c or x < r or y < c


@collective
@requires_data_path()
@pytest.mark.parametrize("ops", [["xy", "yz", "zy", "yx", "halo"], ["xy"], ["halo"]])
def test_grids_with_empty_pencils_give_skipped_rows(ops: list[str], tmp_path: os.PathLike[str]) -> None:
    """On 2 ranks and more 3x2x1 leaves pencils empty on some process grids: their rows are skipped, the rest measured."""
    path = os.path.join(shared_dir(tmp_path), "empty.json")
    argv = ["--gdims", "3,2,1", "--dtypes", "f64", "--backends", "MPI_P2P,DIRECT", "--ops", *ops, "--autotune"]
    assert bench.main([*argv, "--reps", "1", "--warmup", "0", "--quiet", "--json", path]) == 0
    if MPI.COMM_WORLD.rank == 0:
        rows = json.load(open(path))["rows"]
        n = MPI.COMM_WORLD.size
        grids = [(r, n // r) for r in range(1, n + 1) if n % r == 0]
        (tune,) = [r for r in rows if r["op"] == "tune"]
        if all(has_empty_pencil((3, 2, 1), p) for p in grids):
            assert tune["note"].startswith("skipped: NotSupportedError: autotuning: no valid decomposition"), tune
        else:
            assert tune["note"].startswith("autotuner chose"), tune
        for p in grids:
            mine = [r for r in rows if tuple(r["pdims"]) == p and r["op"] != "tune"]
            assert mine, p
            if has_empty_pencil((3, 2, 1), p):
                assert {r["op"] for r in mine} == {"all"}, mine
                assert all(r["note"].startswith("skipped: some rank owns no cells of a pencil (3x2x1 over") for r in mine)
            else:
                assert not any(r["note"] for r in mine), mine
                assert {r["op"] for r in mine} >= {"xy"} if "xy" in ops else {"halo", "hx", "hy"}
    MPI.COMM_WORLD.Barrier()


@collective
@requires_data_path()
def test_halo_extent_beyond_a_ranks_cells_skips_those_rows(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(shared_dir(tmp_path), "halo.json")
    argv = ["--gdims", "8^3", "--dtypes", "f64", "--backends", "MPI_P2P", "--ops", "halo", "--halo", "9", "1", "1"]
    assert bench.main([*argv, "--reps", "1", "--warmup", "0", "--quiet", "--json", path]) == 0
    if MPI.COMM_WORLD.rank == 0:
        rows = json.load(open(path))["rows"]
        for r in rows:
            # X is never split in an X-pencil: 9 > 8 cells along x on every grid.
            if r["op"] in ("halo", "hx"):
                assert r["note"].startswith("skipped: InvalidUsageError: halo_extents[0] = 9"), r
            else:
                assert r["op"] in ("hy", "hz") and not r["note"] and r["ms"] > 0, r
    MPI.COMM_WORLD.Barrier()


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


@pytest.mark.slow
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


@collective
def test_work_on_rank_0_alone_fails_on_every_rank() -> None:
    """What rank 0 measures alone (ceilings, the one-device FFT) reaches every rank, and so does its failure."""
    from cudecomp.bench._measure import on_root

    comm = MPI.COMM_WORLD

    def fails() -> int:
        raise ValueError("no room for the whole array")

    with pytest.raises(ValueError if comm.rank == 0 else RuntimeError, match="no room for the whole array"):
        on_root(comm, fails)
    assert on_root(comm, lambda: comm.rank + 42) == 42


def test_calls_timed_in_turn_take_every_order() -> None:
    """Calls compared in turn run in every order of them: none always follows the same one."""
    from cudecomp.bench._measure import Xp, measure_in_turn

    ran: list[str] = []
    fns = [lambda name=name: ran.append(name) for name in "abc"]
    measure_in_turn(Xp(), MPI.COMM_SELF, fns, 0, 6)
    orders = {"".join(ran[i : i + 3]) for i in range(0, len(ran), 3)}
    assert orders == {"abc", "acb", "bac", "bca", "cab", "cba"}


@collective
@requires_data_path()
def test_floor_stands_beside_every_distributed_transpose(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(shared_dir(tmp_path), "floor.json")
    argv = ["--gdims", "8^3", "--dtypes", "f64", "--backends", "MPI_P2P", "--ops", "xy", "yz", "zy", "yx", "--floor"]
    assert bench.main([*argv, "--reps", "2", "--warmup", "1", "--quiet", "--no-baselines", "--json", path]) == 0
    if MPI.COMM_WORLD.rank == 0:
        rows = [r for r in json.load(open(path))["rows"] if not r["note"]]
        assert len(rows) == 4 * len({tuple(r["pdims"]) for r in rows})
        for r in rows:
            if r["distributed"]:
                b = r["baseline"]
                assert b["copy_floor_ms"] > 0 and math.isclose(b["ratio_vs_copy_floor"], r["ms"] / b["copy_floor_ms"], rel_tol=1e-9)
            else:
                assert "copy_floor_ms" not in r["baseline"], r
        assert any(r["distributed"] for r in rows) == (MPI.COMM_WORLD.size > 1)
    MPI.COMM_WORLD.Barrier()


def test_fft_stages_transform_the_axes_the_pencils_hold() -> None:
    from cudecomp.bench._ops import FFT_STAGES

    class Info:
        def __init__(self, order: tuple[int, int, int]) -> None:
            self.order = order

    # X fastest: array axes (z, y, x); the slab-yz Y-pencil holds y fastest, then z: (x, z, y).
    assert bench._ops.array_axes(Info((0, 1, 2)), (1, 0)) == (1, 2)  # type: ignore[arg-type]
    assert bench._ops.array_axes(Info((1, 2, 0)), (2, 1)) == (1, 2)  # type: ignore[arg-type]
    assert bench._ops.array_axes(Info((2, 0, 1)), (2,)) == (2,)  # type: ignore[arg-type]
    for name, stages in FFT_STAGES.items():
        done: set[int] = set()
        for stage in stages:
            if isinstance(stage[2], tuple):
                done |= set(stage[2])
        assert done == {0, 1, 2}, name  # every axis transformed once
        assert stages[0][1] == "in" and stages[0][2][-1] == 0, name  # the first stage ends with x (halved by r2c)


@collective
@requires_data_path()
def test_fft_stages_follow_the_plans_schedule(tmp_path: os.PathLike[str]) -> None:
    from cudecomp.bench._ops import FFT_STAGES

    path = os.path.join(shared_dir(tmp_path), "stages.json")
    argv = ["--gdims", "8^3", "--dtypes", "f64", "c128", "--ops", "fft", "--fft-stages", "--backends", "MPI_P2P"]
    assert bench.main([*argv, "--reps", "2", "--warmup", "1", "--quiet", "--no-baselines", "--json", path]) == 0
    if MPI.COMM_WORLD.rank == 0:
        rows = [r for r in json.load(open(path))["rows"] if not r["note"]]
        for p in {tuple(r["pdims"]) for r in rows}:
            for d in ("f64", "c128"):
                mine = [r for r in rows if tuple(r["pdims"]) == p and r["dtype"] == d]
                if not mine:
                    continue  # a skipped plan (empty pencils)
                fwd = [r for r in mine if r["op"] == "fft"][0]
                stages = [r for r in mine if r["op"].startswith("stage-")]
                assert [r["op"] for r in stages] == [f"stage-{s[0]}" for s in FFT_STAGES[schedule_of(p)]]
                for r in stages:
                    assert r["ms"] > 0 and r["baseline"]["fft_ms"] == fwd["ms"]
                    assert math.isclose(r["baseline"]["ratio_vs_fft"], r["ms"] / fwd["ms"], rel_tol=1e-9)
                    assert r["distributed"] == (r["op"] in ("stage-xy", "stage-yz") and MPI.COMM_WORLD.size > 1)
    MPI.COMM_WORLD.Barrier()


@requires_data_path()
def test_record_appends_to_the_history_that_makes_the_page(
    tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCCL_VERSION", "2.28.3-1")  # images name what they installed: not a setting
    d = shared_dir(tmp_path)
    path, page = os.path.join(d, "history.csv"), os.path.join(d, "README.md")
    argv = ["--gdims", "8^3", "--dtypes", "f64", "--backends", "MPI_P2P", "--ops", "xy", "--reps", "2", "--warmup", "1"]
    rec = ["--record", path, "--machine", "test box", "--commit", "abc1234", "--quiet"]
    assert bench.main([*argv, *rec]) == 0
    assert bench.main([*argv, "--reps", "3", *rec]) == 0  # a second run appends
    comm = MPI.COMM_WORLD
    if comm.rank == 0:
        lines = open(path).read().splitlines()
        assert lines[0] == ",".join(history.FIELDS) and lines.count(lines[0]) == 1
        h = history.read(path)
        assert {(x["machine"], x["commit"], x["ranks"]) for x in h} == {("test box", "abc1234", str(comm.size))}
        commands = list(dict.fromkeys(x["command"] for x in h))
        assert len(commands) == 2 and all(c.split()[-2:] == ["--reps", r] for c, r in zip(commands, ("2", "3"), strict=True))
        assert all("--record" not in c and "--quiet" not in c and "--gdims 8^3" in c.replace("'", "") for c in commands)
        # The settings in force (the suites set CUDECOMP_CHECK_COLLECTIVES, on or off) lead the command and name the case.
        prefixes = ("CUDECOMP_", "NCCL_", "NVSHMEM_")
        env = [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(prefixes) and not k.endswith("_VERSION")]
        assert f"CUDECOMP_CHECK_COLLECTIVES={os.environ['CUDECOMP_CHECK_COLLECTIVES']}" in env and "NCCL_VERSION" not in commands[0]
        assert shlex.split(commands[0])[: len(env) + 3] == [*env, "python", "-m", "cudecomp.bench"]
        lib = " ".join(e for e in env if e.startswith("CUDECOMP_"))
        case = f"xy 8^3 f64 1x{comm.size} MPI_P2P {lib}"
        ms = [float(x["value"]) for x in h if x["case"] == case and x["metric"] == "ms"]
        assert len(ms) == 2 and all(v > 0 for v in ms)
        assert any(x["case"] == "ceilings" and x["metric"] == "host_copy_gbps" for x in h) == cudecomp.CPU_ONLY
        with open(page, "w") as f:
            f.write(f"# Figures\n\n{history.BEGIN}\n| test box | `{case}` |\n| other box | `{case}` |\n{history.END}\nend\n")
        assert history.main([path, "--check", page]) == 1  # not generated yet
        assert history.main([path, "--update", page]) == 1  # the other box has no run
        err = capsys.readouterr().err
        assert f"no run of {case!r} on 'other box'" in err
        text = open(page).read()
        row = [line for line in text.splitlines() if line.startswith("| test box")][0]
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == history.fmt_ms(ms[1]) and cells[4:] == [h[-1]["date"], "abc1234", "R1"]  # the newest run
        assert f"- R1: `{history.Run(h[-1]['date'], 'abc1234', 'test box', comm.size, commands[1]).launched()}`" in text
        assert "| other box | `" + case + "` | not in the history |" in text and text.endswith("end\n")
        with open(page, "w") as f:
            f.write(text.replace("| other box | `" + case + "` | not in the history | — | — | — | — |\n", ""))
        assert history.main([path, "--update", page]) == 0 and history.main([path, "--check", page]) == 0
        assert history.main([path, "--list"]) == 0
        assert f"test box | {case} |" in capsys.readouterr().out
    comm.Barrier()


def test_the_page_shows_each_figure_beside_what_it_was_compared_with() -> None:
    run = history.Run("2026-12-01", "10ee63e", "2xH200", 2, "CUDECOMP_X=1 python -m cudecomp.bench --gdims 1024^3")
    assert run.launched() == "CUDECOMP_X=1 mpirun -np 2 python -m cudecomp.bench --gdims '1024^3'"
    assert history.Run("d", "c", "m", 1, "python x.py").launched() == "python x.py"
    metrics = {
        "ms": "11.29",
        "gbps_per_rank": "380",
        "pct_of_peer_copy": "96.12",
        "raw_nccl_alltoall_ms": "12.76",
        "ratio_vs_raw_nccl_alltoall": "0.885",
        "cupy_fftn_1gpu_ms": "31.7",
    }
    assert history.figure(metrics) == "11.29 ms"
    assert history.compared(metrics, {"peer_copy": 395.9}) == (
        "96.1 % of peer copy (396 GB/s); 0.885× raw NCCL all-to-all (12.76 ms); cupy.fft on one GPU 31.7 ms"
    )
    # Latency-bound cases get no percentage; ratios far from 1 keep three significant digits.
    assert history.compared({"ms": "0.05", "pct_of_peer_copy": "0.01", "ratio_vs_x": "0.00244"}, {}) == "0.00244× x"
    assert history.compared({"ms": "1", "wall_s": "380", "steps": "5000"}, {}) == "wall time with start-up 380 s; steps 5000"
    assert history.figure({"ms_per_step": "75"}) == "75 ms per step"
    assert history.figure({"chose": "DIRECT 1x2", "ms": "22500"}) == "22.5 s"
    assert history.compared({"chose": "DIRECT 1x2", "ms": "22500"}, {}) == "chose DIRECT 1x2"
    assert history.compared({"ms": "0.0428", "eager_wall_ms": "0.0428", "dissipation_peak_vs_reference_pct": "-0.01"}, {}) == (
        "eager calls 42.8 µs; dissipation-rate peak vs the reference DNS -0.01 %"
    )


def test_the_record_page_is_the_history_of_the_repository() -> None:
    """bench/README.md's figures are exactly what bench/history.csv gives (regenerate with --update)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    page, path = os.path.join(root, "bench", "README.md"), os.path.join(root, "bench", "history.csv")
    assert history.main([path, "--check", page]) == 0
    assert len(open(page).read().splitlines()) <= 90  # a page to read, not a log


def test_records_name_each_case_and_leave_skipped_rows_out() -> None:
    from cudecomp.bench._record import records

    args = bench.parser().parse_args(["--alloc", "library", "--halo", "8", "8", "8"])
    ceil = {"ceiling_peer_copy_gbps": 395.9}
    rows = [
        bench.Row(
            "xy",
            (1024,) * 3,
            (2, 1),
            "DIRECT",
            "c128",
            False,
            ms=11.05,
            gbps_per_rank=389.0,
            pct_of_ceiling=98.2,
            ceiling="peer_copy",
            baseline={**ceil, "copy_floor_ms": 4.1, "ratio_vs_copy_floor": 2.7},
        ),
        bench.Row("hy", (64, 32, 16), (2, 1), "NCCL", "f64", True, halo=(8, 8, 8), ms=1.5, baseline=ceil),
        bench.Row("all", (3, 2, 1), (1, 2), "DIRECT", "c128", False, note="skipped: some rank owns no cells"),
        bench.Row("tune", (3, 2, 1), (0, 0), "", "c128", False, note="skipped: NotSupportedError: no valid decomposition"),
        bench.Row("tune", (512,) * 3, (1, 2), "DIRECT", "c128", False, ms=22500.0, note="autotuner chose DIRECT on 1x2"),
    ]
    got = records(rows, args, {"CUDECOMP_X": "1"})
    assert got == [
        ("ceilings", "peer_copy_gbps", 395.9),
        ("xy 1024^3 c128 2x1 DIRECT alloc=library CUDECOMP_X=1", "ms", 11.05),
        ("xy 1024^3 c128 2x1 DIRECT alloc=library CUDECOMP_X=1", "gbps_per_rank", 389.0),
        ("xy 1024^3 c128 2x1 DIRECT alloc=library CUDECOMP_X=1", "pct_of_peer_copy", 98.2),
        ("xy 1024^3 c128 2x1 DIRECT alloc=library CUDECOMP_X=1", "copy_floor_ms", 4.1),
        ("xy 1024^3 c128 2x1 DIRECT alloc=library CUDECOMP_X=1", "ratio_vs_copy_floor", 2.7),
        ("hy 64x32x16 f64 2x1 NCCL ac halo=8,8,8 CUDECOMP_X=1", "ms", 1.5),
        ("tune 512^3 c128 CUDECOMP_X=1", "ms", 22500.0),
        ("tune 512^3 c128 CUDECOMP_X=1", "chose", "DIRECT 1x2"),
    ]


@collective
@requires_data_path()
def test_redistribute_rows_stand_beside_what_users_write(tmp_path: os.PathLike[str]) -> None:
    """--ops redistribute: each row with its same-run comparisons (hand-written moves on host memory)."""
    path = os.path.join(shared_dir(tmp_path), "rd.json")
    argv = ["--gdims", "8,6,4", "--dtypes", "f64", "--backends", "MPI_P2P", "--ops", "redistribute", "--no-baselines"]
    assert bench.main([*argv, "--reps", "1", "--warmup", "0", "--quiet", "--json", path]) == 0
    if MPI.COMM_WORLD.rank == 0:
        rows = [r for r in json.load(open(path))["rows"] if not r["note"].startswith("skipped")]
        ops = {r["op"] for r in rows}
        assert {"rd-xy", "rd-xz", "rd-brick"} <= ops, ops
        assert ("rd-grid" in ops) == (MPI.COMM_WORLD.size > 1)
        for r in rows:
            assert r["ms"] > 0, r
            want = {"rd-xy": ["transpose_ms"], "rd-xz": ["xy_then_yz_ms"]}.get(r["op"], ["alltoallw_ms", "gather_scatter_ms"])
            if cudecomp.CPU_ONLY or r["op"] in ("rd-xy", "rd-xz"):
                for k in want:
                    base = r["baseline"]
                    assert base[k] > 0 and math.isclose(base["ratio_vs_" + k[:-3]], r["ms"] / base[k], rel_tol=1e-9)
    MPI.COMM_WORLD.Barrier()


@collective
@requires_data_path()
def test_io_rows_stand_beside_own_files_and_one_file(tmp_path: os.PathLike[str]) -> None:
    """--ops io: a write and a read row, each beside every rank's own file and one pwrite per rank into one file."""
    d = shared_dir(tmp_path)
    path, where = os.path.join(d, "io.json"), os.path.join(d, "files")
    if MPI.COMM_WORLD.rank == 0:
        os.mkdir(where)
    MPI.COMM_WORLD.Barrier()
    argv = ["--gdims", "8,6,4", "--dtypes", "f64", "--backends", "MPI_P2P", "--ops", "io", "--io-dir", where]
    assert bench.main([*argv, "--reps", "1", "--warmup", "0", "--quiet", "--json", path]) == 0
    if MPI.COMM_WORLD.rank == 0:
        rows = [r for r in json.load(open(path))["rows"] if not r["note"].startswith("skipped")]
        assert sorted(r["op"] for r in rows) == sorted(["io-write", "io-read"] * len({tuple(r["pdims"]) for r in rows}))
        for r in rows:
            base = r["baseline"]
            assert r["ms"] > 0 and r["ceiling"] == "own_files", r
            for k in ("own_files_ms", "one_file_pwrite_ms"):
                assert base[k] > 0 and math.isclose(base["ratio_vs_" + k[:-3]], r["ms"] / base[k], rel_tol=1e-9)
        assert os.listdir(where) == []  # every configuration's files are removed
    MPI.COMM_WORLD.Barrier()


@requires_cpu_variant()
def test_fft_compare_records_the_local_stage_beside_the_other_libraries(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "history.csv")
    argv = ["--fft-compare", "local", "--gdims", "8^3", "--dtypes", "c128", "f64", "--reps", "1", "--warmup", "0", "--fft-rounds", "1"]
    assert bench.main([*argv, "--record", path, "--machine", "box", "--commit", "abc1234"]) == 0
    h = history.read(path)
    cases = list(dict.fromkeys(x["case"] for x in h))
    lib = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("CUDECOMP_"))
    kinds = [("c128", "c2c", "forward"), ("c128", "c2c", "backward"), ("f64", "r2c", "forward"), ("f64", "c2r", "backward")]
    assert cases == [f"fft-local 8^3 {d} 1x1 {k} {direction} {lib}".strip() for d, k, direction in kinds]
    assert all("--fft-compare local" in x["command"] and "--fft-rounds 1" in x["command"] for x in h)
    for case in cases:
        m = {x["metric"]: float(x["value"]) for x in h if x["case"] == case}
        assert m["ms"] > 0 and m["numpy_ms"] > 0
        assert math.isclose(m["ratio_vs_numpy"], m["ms"] / m["numpy_ms"], rel_tol=1e-4)


@requires_cpu_variant()
def test_fft_compare_times_a_cosine_transform_beside_scipy_and_fftw(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "history.csv")
    argv = ["--fft-compare", "local", "--fft-transforms", "dct2", "--gdims", "8^3", "--dtypes", "f64", "c128", "--reps", "1"]
    assert bench.main([*argv, "--warmup", "0", "--fft-rounds", "1", "--record", path, "--machine", "box", "--commit", "abc1234"]) == 0
    h = history.read(path)
    lib = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("CUDECOMP_"))
    # complex data has no cosine transform: that dtype's row is skipped, not recorded
    assert list(dict.fromkeys(x["case"] for x in h)) == [f"fft-local 8^3 f64 1x1 dct2 {d} {lib}".strip() for d in ("forward", "backward")]
    for case in {x["case"] for x in h}:
        m = {x["metric"]: float(x["value"]) for x in h if x["case"] == case}
        assert m["ms"] > 0 and m["scipy_ms"] > 0
        assert math.isclose(m["ratio_vs_scipy"], m["ms"] / m["scipy_ms"], rel_tol=1e-4)


def test_fft_compare_records_each_grid_and_each_sides_best() -> None:
    rows: list[dict[str, Any]] = [
        {"mode": "pfft", "gdims": (256, 256, 256), "dtype": "c128", "note": "skipped: mpi4py-fft is not installed"},
        {"mode": "pfft", "gdims": (256,) * 3, "pdims": (4, 4), "dtype": "f64", "kind": "r2c", "direction": "forward",
         "schedule": "pencil", "backend": "DIRECT", "ms": {"cudecomp": 10.0, "mpi4py-fft": 20.0}, "speedup": 2.0},
        {"mode": "pfft", "gdims": (256,) * 3, "pdims": "best", "best_pdims": {"cudecomp": (4, 4), "mpi4py-fft": (1, 16)},
         "dtype": "f64", "kind": "r2c", "direction": "forward", "ms": {"cudecomp": 10.0, "mpi4py-fft": 16.0}, "speedup": 1.6},
    ]  # fmt: skip
    got = _fft_local.records(rows, 16, {"CUDECOMP_HOST_THREADS": "1"})
    assert got == [
        ("fft-pfft 256^3 f64 4x4 DIRECT r2c forward CUDECOMP_HOST_THREADS=1", "ms", 10.0),
        ("fft-pfft 256^3 f64 4x4 DIRECT r2c forward CUDECOMP_HOST_THREADS=1", "mpi4py_fft_pfft_fftw_ms", 20.0),
        ("fft-pfft 256^3 f64 4x4 DIRECT r2c forward CUDECOMP_HOST_THREADS=1", "ratio_vs_mpi4py_fft_pfft_fftw", 0.5),
        ("fft-pfft 256^3 f64 best-of-16 r2c forward CUDECOMP_HOST_THREADS=1", "ms", 10.0),
        ("fft-pfft 256^3 f64 best-of-16 r2c forward CUDECOMP_HOST_THREADS=1", "mpi4py_fft_pfft_fftw_ms", 16.0),
        ("fft-pfft 256^3 f64 best-of-16 r2c forward CUDECOMP_HOST_THREADS=1", "ratio_vs_mpi4py_fft_pfft_fftw", 0.625),
        ("fft-pfft 256^3 f64 best-of-16 r2c forward CUDECOMP_HOST_THREADS=1", "grids", "ours 4x4, theirs 1x16"),
    ]
    m = {k: history.format_value(v) for _, k, v in got[3:]}
    assert history.compared(m, {}) == "0.625× mpi4py-fft PFFT with FFTW (16 ms); grids ours 4x4, theirs 1x16"


def test_history_of_a_page_that_cannot_be_read_is_an_error(tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]) -> None:
    from cudecomp.bench import history

    assert history.main([os.path.join(os.path.dirname(__file__), "..", "bench", "history.csv"), "--update", "no/page.md"]) == 2
    assert "no/page.md: No such file or directory" in capsys.readouterr().err
