"""Ranks of one machine behaving as several nodes (``CUDECOMP_SIMULATE_NODES`` /
``CUDECOMP_NODE_ID``): DIRECT is refused on every rank at grid creation, the autotuner
leaves it out, and everything else works (the transpose and halo suites run under the
same setting in scripts/test.sh)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_data_path
from cudecomp import DataType, HaloCommBackend, TransposeCommBackend
from oracle import device, factor_pairs, make, to_host

pytestmark = [pytest.mark.mpi, requires_data_path()]

COMM = MPI.COMM_WORLD
NRANKS = COMM.size
SIMULATED = int(os.environ.get("CUDECOMP_SIMULATE_NODES", "1")) > 1
GDIMS = (9, 10, 11)


def config(**kw: object) -> cudecomp.GridDescConfig:
    c = cudecomp.GridDescConfig()
    c.gdims, c.pdims = GDIMS, factor_pairs(NRANKS)[-1]
    for k, v in kw.items():
        setattr(c, k, v)
    return c


def works(handle: cudecomp.Handle, **kw: object) -> None:
    with handle.create_grid(config(**kw)) as g:
        ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
        out = g.transpose_x_to_y(device(make(ia, GDIMS, DataType.DOUBLE)))
        assert np.array_equal(to_host(out), make(ib, GDIMS, DataType.DOUBLE))


@pytest.mark.skipif(not SIMULATED, reason="needs CUDECOMP_SIMULATE_NODES > 1")
@pytest.mark.parametrize(
    "kw",
    [{"transpose_comm_backend": TransposeCommBackend.DIRECT}, {"halo_comm_backend": HaloCommBackend.DIRECT}],
    ids=["transpose", "halo"],
)
def test_direct_refused_across_nodes(handle: cudecomp.Handle, kw: dict[str, object]) -> None:
    with pytest.raises(cudecomp.NotSupportedError, match="one node"):
        handle.create_grid(config(**kw))
    works(handle)


@pytest.mark.skipif(not SIMULATED, reason="needs CUDECOMP_SIMULATE_NODES > 1")
def test_autotuner_leaves_direct_out(handle: cudecomp.Handle) -> None:
    o = cudecomp.GridDescAutotuneOptions()
    o.n_warmup_trials, o.n_trials = 1, 1
    o.autotune_transpose_backend = o.autotune_halo_backend = True
    o.halo_extents = (1, 1, 1)
    cfg = config()
    cfg.pdims = (0, 0)
    with handle.create_grid(cfg, o) as g:
        tried = {t.backend.name for t in g.autotune_result.trials}
    assert "DIRECT" not in tried
    assert cfg.transpose_comm_backend is not TransposeCommBackend.DIRECT


@pytest.mark.parametrize("value", ["0", "x", str(NRANKS + 1), "-2"])
def test_bad_node_settings_raise_everywhere(comm: MPI.Comm, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    # Only the last rank is misconfigured: every rank must raise, none may hang.
    # (Refused when the handle is created where the value is not a number or differs
    # across ranks, when the first grid asks for the nodes where it exceeds the ranks.)
    if comm.rank == comm.size - 1:
        monkeypatch.setenv("CUDECOMP_SIMULATE_NODES", value)
    with pytest.raises(cudecomp.InvalidUsageError, match="CUDECOMP_SIMULATE_NODES"):
        with cudecomp.Handle(comm) as h:
            h.create_grid(config(transpose_comm_backend=TransposeCommBackend.DIRECT))
    monkeypatch.delenv("CUDECOMP_SIMULATE_NODES", raising=False)


@pytest.mark.skipif(NRANKS < 2, reason="needs two ranks")
def test_node_id_per_rank(comm: MPI.Comm, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDECOMP_SIMULATE_NODES", raising=False)
    monkeypatch.setenv("CUDECOMP_NODE_ID", str(comm.rank % 2))
    with cudecomp.Handle(comm) as h:
        with pytest.raises(cudecomp.NotSupportedError, match="one node"):
            h.create_grid(config(transpose_comm_backend=TransposeCommBackend.DIRECT))
        works(h)


def test_one_node_follows_the_node_identity(handle: cudecomp.Handle) -> None:
    # What the benchmark asks before it compares with a copy ceiling: simulated nodes
    # stand for network traffic.
    node = COMM.Split_type(MPI.COMM_TYPE_SHARED)
    one_host = COMM.allreduce(node.size == NRANKS, op=MPI.LAND)
    node.Free()
    assert handle.one_node() is (one_host and (not SIMULATED or NRANKS == 1))
    works(handle)


def test_one_gpu_per_rank(handle: cudecomp.Handle) -> None:
    # The CPU variant has no GPUs; in the GPU variant, ranks of one node share a GPU when
    # there are fewer GPUs than ranks on it.
    if cudecomp.CPU_ONLY:
        assert handle.one_gpu_per_rank() is False
        return
    import cupy

    node = COMM.Split_type(MPI.COMM_TYPE_SHARED)
    own = COMM.allreduce(node.size <= cupy.cuda.runtime.getDeviceCount(), op=MPI.LAND)
    node.Free()
    # Simulated nodes count as separate machines, whose GPUs never collide.
    assert handle.one_gpu_per_rank() is (own or SIMULATED)
    works(handle)
