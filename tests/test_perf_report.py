"""The performance report: summary at destroy() and CSV files with upstream's names."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import handle_with, requires_data_path
from cudecomp import DataType
from oracle import device, factor_pairs, make, variant_transpose_backends, xp

pytestmark = [pytest.mark.mpi, requires_data_path()]


@pytest.mark.parametrize("backend", variant_transpose_backends(), ids=lambda b: b.name)
def test_report_summary_and_csv(
    tmp_path: os.PathLike[str], capfd: pytest.CaptureFixture[str], backend: cudecomp.TransposeCommBackend
) -> None:
    comm = MPI.COMM_WORLD
    out = comm.bcast(str(tmp_path) if comm.rank == 0 else None)
    env = {
        "CUDECOMP_ENABLE_PERFORMANCE_REPORT": "1",
        "CUDECOMP_PERFORMANCE_REPORT_DETAIL": "2",
        "CUDECOMP_PERFORMANCE_REPORT_SAMPLES": "4",
        "CUDECOMP_PERFORMANCE_REPORT_WARMUP_SAMPLES": "1",
        "CUDECOMP_PERFORMANCE_REPORT_WRITE_DIR": out,
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        # The report's settings are read when the handle is created.
        handle = cudecomp.Handle(comm)
        cfg = cudecomp.GridDescConfig()
        cfg.gdims, cfg.pdims = (8, 9, 10), factor_pairs(comm.size)[-1]
        cfg.transpose_comm_backend = backend
        grid = handle.create_grid(cfg)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
    ix, iy = grid.get_pencil_info(0), grid.get_pencil_info(1, (1, 1, 1))
    x = device(make(ix, cfg.gdims, DataType.DOUBLE))
    y = xp.zeros(iy.array_shape)
    for _ in range(6):
        grid.transpose_x_to_y(x, y, output_halo_extents=(1, 1, 1))
        grid.update_halos_y(y, (1, 1, 1), (True, False, True), 2)
    grid.destroy()
    handle.finalize()
    text = capfd.readouterr().out
    if comm.rank == 0:
        assert "CUDECOMP: ===== Performance Summary =====" in text
        assert "TransposeXY,D,[0 0 0],[1 1 1]" in text
        agg = glob.glob(
            os.path.join(
                out, f"cudecomp-perf-report-transpose-aggregated-tcomm_{int(backend)}-hcomm_*-pdims_*-gdims_8x9x10-memorder_012012012.csv"
            )
        )
        assert len(agg) == 1
        lines = [ln for ln in open(agg[0]) if not ln.startswith("#")]
        assert lines[0].strip().endswith("samples,total_ms,A2A_ms,local_ms,A2A_BW_GBps")
        fields = lines[1].strip().split(",")
        # One field per call (the fields column), 4 samples.
        assert fields[0] == "TransposeXY" and int(fields[8]) == 1 and int(fields[9]) == 4
        total, comm_ms = float(fields[10]), float(fields[11])
        assert total >= 0 and np.isfinite(total)
        # Communication is part of the operation (pipelines measure their own span).
        assert 0 <= comm_ms <= total * 1.01 + 1e-3
        halo = glob.glob(os.path.join(out, "cudecomp-perf-report-halo-samples-*.csv"))
        assert len(halo) == 1
        rows = [ln for ln in open(halo[0]) if not ln.startswith("#")][1:]
        assert len(rows) == 4 * comm.size  # DETAIL=2: every rank's ring of 4 samples
    comm.Barrier()


def test_redistributions_report_their_runs(tmp_path: os.PathLike[str], capfd: pytest.CaptureFixture[str]) -> None:
    """A redistribution's runs are timed and its destroy() logs them (operation Redistribute)."""
    from conftest import handle_with

    comm = MPI.COMM_WORLD
    out = comm.bcast(str(tmp_path) if comm.rank == 0 else None)
    with handle_with(
        CUDECOMP_ENABLE_PERFORMANCE_REPORT="1", CUDECOMP_PERFORMANCE_REPORT_WARMUP_SAMPLES="1", CUDECOMP_PERFORMANCE_REPORT_WRITE_DIR=out
    ) as handle:
        cfg = cudecomp.GridDescConfig()
        cfg.gdims, cfg.pdims = (8, 9, 10), factor_pairs(comm.size)[-1]
        with handle.create_grid(cfg) as grid:
            gdims = cfg.gdims
            root = cudecomp.BoxLayout.whole(gdims) if comm.rank == 0 else cudecomp.BoxLayout.empty()
            r = handle.create_redistribution(grid.pencil(2), root)
            x = device(make(r.input_info, gdims, DataType.DOUBLE))
            for _ in range(3):
                r.run(x)
            r.destroy()
    text = capfd.readouterr().out
    if comm.rank == 0:
        assert "CUDECOMP: Redistribution:" in text and "Redistribute,D," in text, text
        assert glob.glob(os.path.join(out, "cudecomp-perf-report-transpose-aggregated-redistribution*-gdims_8x9x10.csv"))
    comm.Barrier()


@pytest.mark.parametrize(
    "var, bad",
    [
        ("CUDECOMP_PERFORMANCE_REPORT_DETAIL", "3"),
        ("CUDECOMP_PERFORMANCE_REPORT_SAMPLES", "0"),
        ("CUDECOMP_PERFORMANCE_REPORT_WARMUP_SAMPLES", "-1"),
    ],
)
def test_report_settings_are_checked_while_the_report_is_off(var: str, bad: str) -> None:
    with pytest.raises(cudecomp.InvalidUsageError, match=var):
        with handle_with(CUDECOMP_ENABLE_PERFORMANCE_REPORT=None, **{var: bad}):
            pass


@pytest.mark.mpi(min_ranks=2)
def test_a_report_setting_that_differs_is_named() -> None:
    last = MPI.COMM_WORLD.rank == MPI.COMM_WORLD.size - 1
    with pytest.raises(cudecomp.InvalidUsageError, match="CUDECOMP_PERFORMANCE_REPORT_SAMPLES is 5 on rank 0 and 7 on rank"):
        with handle_with(CUDECOMP_ENABLE_PERFORMANCE_REPORT="1", CUDECOMP_PERFORMANCE_REPORT_SAMPLES="7" if last else "5"):
            pass


@pytest.mark.mpi(min_ranks=2)
def test_a_write_dir_rank_0_cannot_make_raises_on_every_rank(tmp_path: os.PathLike[str]) -> None:
    comm = MPI.COMM_WORLD
    path = comm.bcast(os.path.join(str(tmp_path), "a-file") if comm.rank == 0 else None)
    if comm.rank == 0:
        open(path, "w").close()
    comm.Barrier()
    with handle_with(CUDECOMP_ENABLE_PERFORMANCE_REPORT="1", CUDECOMP_PERFORMANCE_REPORT_WRITE_DIR=path) as h:
        cfg = cudecomp.GridDescConfig()
        cfg.gdims, cfg.pdims = (8, 8, 8), (1, comm.size)
        g = h.create_grid(cfg)
        x = device(np.zeros(g.get_pencil_info(0).array_shape))
        g.transpose_x_to_y(x)
        expected = "CUDECOMP_PERFORMANCE_REPORT_WRITE_DIR" if comm.rank == 0 else "rank 0 failed in the performance report"
        with pytest.raises(cudecomp.InvalidUsageError, match=expected):
            g.destroy()
        with pytest.raises(cudecomp.InvalidUsageError, match="destroyed"):
            g.destroy()
        # The handle goes on working (and each report it cannot write raises alike).
        g2 = h.create_grid(cfg)
        assert g2.transpose_x_to_y(x).shape == tuple(g2.get_pencil_info(1).array_shape)
        with pytest.raises(cudecomp.InvalidUsageError, match=expected):
            g2.destroy()
