"""Operations inside the caller's CUDA graph capture (GPU variant, NCCL and NVSHMEM backends).

Captured: the four transposes and three halo updates of NCCL, NCCL_PL and NVSHMEM-family
grids, replayed many times with changing data and checked against the global-index oracle
on every replay.
Refused with NotSupportedError, the stream staying usable: captures before the first
(eager) run, with the performance report on, with MPI or DIRECT backends, and growth of a
workspace a graph uses."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import gpu_available, handle_with
from cudecomp import DataType, HaloCommBackend, TransposeCommBackend
from oracle import direct_usable, factor_pairs, make, nccl_usable, nvshmem_usable

NRANKS = MPI.COMM_WORLD.size
GDIMS = (12, 10, 9)
HALO = (1, 1, 1)
LOCAL_ONLY = "within one rank nothing is exchanged, and every backend's local copies are captured"
NO_WORKSPACE = "within one rank, out of place, no call takes the workspace: nothing grows in a capture"

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.gpu,
    pytest.mark.skipif(not (gpu_available() and nccl_usable()), reason="needs the GPU variant with one GPU per rank (NCCL)"),
]


def config(t: TransposeCommBackend, h: HaloCommBackend, pdims: tuple[int, int], gdims: tuple[int, int, int] = GDIMS) -> Any:
    c = cudecomp.GridDescConfig()
    c.gdims, c.pdims = gdims, pdims
    c.transpose_comm_backend, c.halo_comm_backend = t, h
    return c


def expected_halo(info: cudecomp.PencilInfo, gdims: tuple[int, int, int]) -> np.ndarray:
    """Every cell of a periodic halo-extended pencil holds its wrapped global index."""
    k, j, i = np.indices(info.array_shape, dtype=np.int64)
    pos = (i, j, k)
    g: list[np.ndarray] = [np.empty(0)] * 3
    for p in range(3):
        ax = info.order[p]
        g[ax] = (pos[p] + info.lo[p] - info.halo_extents[ax]) % gdims[ax]
    return (g[0] + gdims[0] * (g[1] + gdims[1] * g[2])).astype(np.float64)


class Sequence7:
    """Buffers and calls of X->Y->Z->Y->X plus three halo updates, on one stream."""

    def __init__(self, grid: cudecomp.GridDesc, stream: Any) -> None:
        import cupy as cp

        self.grid, self.s = grid, stream
        info = [grid.get_pencil_info(a) for a in range(3)]
        self.hinfo = grid.get_pencil_info(0, HALO)
        self.base_x = cp.asarray(make(info[0], GDIMS, DataType.DOUBLE))
        self.want = [make(i, GDIMS, DataType.DOUBLE) for i in info]
        self.base_h = cp.asarray(expected_halo(self.hinfo, GDIMS))
        self.want_h = expected_halo(self.hinfo, GDIMS)
        self.x, self.x2 = cp.zeros_like(self.base_x), cp.zeros_like(self.base_x)
        self.y, self.y2 = (cp.zeros(info[1].array_shape) for _ in range(2))
        self.z = cp.zeros(info[2].array_shape)
        self.h = cp.zeros(self.hinfo.array_shape)
        self.halo_mask = cp.asarray(self._interior_mask())

    def _interior_mask(self) -> np.ndarray:
        m = np.zeros(self.hinfo.array_shape, bool)
        m[self.hinfo.interior_slices] = True
        return m

    def load(self, scale: float) -> None:
        """New input on the stream: scaled oracle data, halos wiped."""
        import cupy as cp

        with self.s:
            self.x[...] = self.base_x * scale
            self.h[...] = cp.where(self.halo_mask, self.base_h * scale, -1.0)

    def run(self) -> None:
        g, s = self.grid, self.s
        g.transpose_x_to_y(self.x, self.y, stream=s)
        g.transpose_y_to_z(self.y, self.z, stream=s)
        g.transpose_z_to_y(self.z, self.y2, stream=s)
        g.transpose_y_to_x(self.y2, self.x2, stream=s)
        for dim in range(3):
            g.update_halos_x(self.h, HALO, (True, True, True), dim, stream=s)

    def check(self, scale: float) -> None:
        self.s.synchronize()
        for got, want in ((self.y, self.want[1]), (self.z, self.want[2]), (self.y2, self.want[1]), (self.x2, self.want[0])):
            assert np.array_equal(got.get(), want * scale)
        assert np.array_equal(self.h.get(), self.want_h * scale)


@pytest.fixture
def stream() -> Iterator[Any]:
    import cupy as cp

    s = cp.cuda.Stream(non_blocking=True)
    yield s
    s.synchronize()


CAPTURABLE = [
    (TransposeCommBackend.NCCL, HaloCommBackend.NCCL),
    (TransposeCommBackend.NCCL_PL, HaloCommBackend.NCCL),
    (TransposeCommBackend.NVSHMEM, HaloCommBackend.NVSHMEM),
    (TransposeCommBackend.NVSHMEM_PL, HaloCommBackend.NVSHMEM_BLOCKING),
    (TransposeCommBackend.NVSHMEM_SM, HaloCommBackend.NVSHMEM),
]


@pytest.mark.parametrize("pdims", factor_pairs(NRANKS), ids=lambda p: f"{p[0]}x{p[1]}")
@pytest.mark.parametrize("backend, halo", CAPTURABLE, ids=lambda b: b.name)
def test_capture_and_replay(
    comm: MPI.Comm, stream: Any, backend: TransposeCommBackend, halo: HaloCommBackend, pdims: tuple[int, int]
) -> None:
    if backend.name.startswith("NVSHMEM") and not nvshmem_usable():
        pytest.skip("needs NVSHMEM's host library (pip install nvidia-nvshmem-cu13)")
    # A handle of its own: a capture freezes the handle's workspace at its size.
    with cudecomp.Handle(comm) as h, h.create_grid(config(backend, halo, pdims)) as grid:
        seq = Sequence7(grid, stream)
        seq.load(1.0)
        seq.run()  # warm-up: workspace, library stream and kernels set up eagerly
        seq.check(1.0)
        stream.begin_capture()
        seq.run()
        graph = stream.end_capture()
        for i in range(100):
            scale = float(i + 2)
            seq.load(scale)
            graph.launch(stream)
            seq.check(scale)
        # Eager calls still agree with the graph afterwards.
        seq.load(3.0)
        seq.run()
        seq.check(3.0)
        del graph  # graphs go before the handle (NCCL's communicator) is finalized


def rejected(stream: Any, call: Any, match: str) -> None:
    """`call` inside a capture raises NotSupportedError; the capture ends cleanly."""
    stream.begin_capture()
    try:
        with pytest.raises(cudecomp.NotSupportedError, match=match):
            call()
    finally:
        stream.end_capture()


@pytest.mark.skipif(NRANKS == 1, reason=NO_WORKSPACE)
def test_capture_before_warm_up(stream: Any, comm: MPI.Comm) -> None:
    with cudecomp.Handle(comm) as h:
        with h.create_grid(config(TransposeCommBackend.NCCL, HaloCommBackend.NCCL, factor_pairs(NRANKS)[-1])) as g:
            seq = Sequence7(g, stream)
            seq.load(1.0)
            rejected(stream, seq.run, "run the operation once")
            seq.run()  # the stream and handle still work
            seq.check(1.0)


@pytest.mark.parametrize(
    "t, h, match",
    [
        (TransposeCommBackend.MPI_P2P, HaloCommBackend.NCCL, "MPI_P2P cannot be captured"),
        (TransposeCommBackend.MPI_A2A, HaloCommBackend.NCCL, "MPI_A2A cannot be captured"),
        (TransposeCommBackend.DIRECT, HaloCommBackend.NCCL, "DIRECT cannot be captured"),
    ],
)
def test_backends_that_cannot_be_captured(handle: cudecomp.Handle, stream: Any, t: Any, h: Any, match: str) -> None:
    if NRANKS == 1:
        pytest.skip(LOCAL_ONLY)
    if t is TransposeCommBackend.DIRECT and not direct_usable():
        pytest.skip("DIRECT needs one node (refused at grid creation across nodes, simulated ones included)")
    with handle.create_grid(config(t, h, factor_pairs(NRANKS)[-1])) as g:
        seq = Sequence7(g, stream)
        seq.load(1.0)
        seq.run()
        rejected(stream, lambda: g.transpose_x_to_y(seq.x, seq.y, stream=stream), match)
        seq.load(2.0)
        seq.run()
        seq.check(2.0)


@pytest.mark.parametrize(
    "h, match", [(HaloCommBackend.MPI, "MPI cannot be captured"), (HaloCommBackend.DIRECT, "DIRECT cannot be captured")]
)
def test_halo_backends_that_cannot_be_captured(handle: cudecomp.Handle, stream: Any, h: Any, match: str) -> None:
    if NRANKS == 1:
        pytest.skip(LOCAL_ONLY)
    if h is HaloCommBackend.DIRECT and not direct_usable():
        pytest.skip("DIRECT needs one node (refused at grid creation across nodes, simulated ones included)")
    with handle.create_grid(config(TransposeCommBackend.NCCL, h, factor_pairs(NRANKS)[-1])) as g:
        seq = Sequence7(g, stream)
        seq.load(1.0)
        seq.run()
        rejected(stream, lambda: g.update_halos_x(seq.h, HALO, (True, True, True), 1, stream=stream), match)
        seq.load(2.0)
        seq.run()
        seq.check(2.0)


def test_performance_report_refused(stream: Any) -> None:
    with handle_with(CUDECOMP_ENABLE_PERFORMANCE_REPORT="1") as handle:
        g = handle.create_grid(config(TransposeCommBackend.NCCL, HaloCommBackend.NCCL, factor_pairs(NRANKS)[-1]))
        reported_capture_refused(g, stream)


def reported_capture_refused(g: cudecomp.GridDesc, stream: Any) -> None:
    """With the report on, a capture is refused and eager runs go on (destroys ``g``)."""
    try:
        seq = Sequence7(g, stream)
        seq.load(1.0)
        seq.run()
        rejected(stream, seq.run, "performance report")
        seq.load(2.0)
        seq.run()
        seq.check(2.0)
    finally:
        g.destroy()


@pytest.mark.skipif(NRANKS == 1, reason=NO_WORKSPACE)
def test_frozen_workspace(stream: Any, comm: MPI.Comm) -> None:
    import cupy as cp

    with cudecomp.Handle(comm) as h:
        pdims = factor_pairs(NRANKS)[-1]
        with h.create_grid(config(TransposeCommBackend.NCCL, HaloCommBackend.NCCL, pdims)) as g:
            seq = Sequence7(g, stream)
            seq.load(1.0)
            seq.run()
            stream.begin_capture()
            seq.run()
            graph = stream.end_capture()
            big = (48, 40, 36)
            with h.create_grid(config(TransposeCommBackend.NCCL, HaloCommBackend.NCCL, pdims, big)) as g2:
                ia, ib = g2.get_pencil_info(0), g2.get_pencil_info(1)
                x = cp.asarray(make(ia, big, DataType.DOUBLE))
                y = cp.zeros(ib.array_shape)
                with pytest.raises(cudecomp.NotSupportedError, match="captured CUDA graph"):
                    g2.transpose_x_to_y(x, y, stream=stream)
                work = cp.zeros(g2.get_transpose_workspace_size() * 8, np.uint8)
                g2.transpose_x_to_y(x, y, stream=stream, work=work)
                stream.synchronize()
                assert np.array_equal(y.get(), make(ib, big, DataType.DOUBLE))
            for scale in (5.0, 6.0):
                seq.load(scale)
                graph.launch(stream)
                seq.check(scale)
            del graph  # graphs go before the handle (NCCL's communicator) is finalized


@pytest.mark.skipif(os.environ.get("CUDECOMP_SKIP_TORCH") == "1", reason="torch tests disabled")
def test_torch_graph(handle: cudecomp.Handle) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    with handle.create_grid(config(TransposeCommBackend.NCCL, HaloCommBackend.NCCL, factor_pairs(NRANKS)[-1])) as g:
        ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
        dev = torch.device("cuda", torch.cuda.current_device())
        base = torch.as_tensor(make(ia, GDIMS, DataType.DOUBLE), device=dev)
        x = base.clone()
        y = torch.zeros(ib.array_shape, dtype=torch.float64, device=dev)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            g.transpose_x_to_y(x, y, stream=s.cuda_stream)  # warm-up
        s.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            g.transpose_x_to_y(x, y, stream=s.cuda_stream)
        for scale in (2.0, 3.0, 4.0):
            x.copy_(base * scale)
            graph.replay()
            torch.cuda.synchronize()
            assert np.array_equal(y.cpu().numpy(), make(ib, GDIMS, DataType.DOUBLE) * scale)
