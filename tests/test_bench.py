"""Smoke test of the benchmark CLI on tiny sizes (no timing is asserted)."""

from __future__ import annotations

import json
import os

from mpi4py import MPI

import cudecomp
from conftest import requires_data_path
from cudecomp import bench

pytestmark = requires_data_path()


def test_bench_smoke(tmp_path: os.PathLike[str]) -> None:
    comm = MPI.COMM_WORLD
    path = comm.bcast(str(tmp_path) if comm.rank == 0 else None)
    out = os.path.join(path, "rows.json")
    csv = os.path.join(path, "rows.csv")
    args = ["--gdims", "8^3", "--dtypes", "f64", "--reps", "2", "--warmup", "1", "--quiet", "--autotune", "--json", out, "--csv", csv]
    assert bench.main(args) == 0
    if comm.rank == 0:
        rows = json.load(open(out))["rows"]
        ops = {r["op"] for r in rows if not r["note"]}
        assert {"xy", "yz", "zy", "yx", "halo"} <= ops
        assert all(r["ms"] > 0 for r in rows if not r["note"])
        assert open(csv).readline().startswith("op,")
        tuned = [r for r in rows if r["op"] == "tune"]
        assert len(tuned) == 1 and tuned[0]["pdims"][0] * tuned[0]["pdims"][1] == comm.size
        assert tuned[0]["backend"] in {b.name for b in cudecomp.TransposeCommBackend}
    comm.Barrier()
