"""Smoke test of the benchmark CLI on tiny sizes (no timing is asserted)."""

from __future__ import annotations

import json
import os

from mpi4py import MPI

from conftest import requires_data_path
from cudecomp import bench

pytestmark = requires_data_path()


def test_bench_smoke(tmp_path: os.PathLike[str]) -> None:
    comm = MPI.COMM_WORLD
    path = comm.bcast(str(tmp_path) if comm.rank == 0 else None)
    out = os.path.join(path, "rows.json")
    csv = os.path.join(path, "rows.csv")
    args = ["--gdims", "8^3", "--dtypes", "f64", "--reps", "2", "--warmup", "1", "--quiet", "--json", out, "--csv", csv]
    assert bench.main(args) == 0
    if comm.rank == 0:
        rows = json.load(open(out))["rows"]
        ops = {r["op"] for r in rows if not r["note"]}
        assert {"xy", "yz", "zy", "yx", "halo"} <= ops
        assert all(r["ms"] > 0 for r in rows if not r["note"])
        assert open(csv).readline().startswith("op,")
    comm.Barrier()
