"""Transposes with input or output in steps (``input_ready``, ``output_ready``), and GPU single copies by the copy engine.

A producer writes the input slab by slab (Z planes of a Y-pencil, or Y rows of a Z-pencil
with ``input_ready_axis=1``) on its own stream, recording an event after each slab (after
a delay, so that a transpose that did not wait would read cells not yet written); the
transpose runs on another stream with those events and must still match the global-index
oracle exactly. DIRECT between library arrays (whole rows of at least 4 KiB: the copy
engine's single copies, taken by default) moves each slab as its event completes; the
other backends wait for every event first. Output steps mirror it: a consumer stream
waits for each event the transpose records and copies that step's cells out at once;
what it copied must be the oracle's cells. The CPU variant refuses events.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import gpu_available, handle_with, requires_data_path
from cudecomp import DataType, TransposeCommBackend
from cudecomp import _cudecomp as ext
from oracle import make, nccl_usable

pytestmark = [pytest.mark.mpi, requires_data_path()]

NRANKS = MPI.COMM_WORLD.size
GPU = not cudecomp.CPU_ONLY
# X rows of 1024 cells: every chunk of a (1, P) grid's Y→Z is whole rows of >= 4 KiB.
GDIMS = (1024, 8, 6)
gpu_only = pytest.mark.skipif(not GPU or not gpu_available(), reason="input_ready orders GPU work")

DELAY = r"""
extern "C" __global__ void delay(unsigned long long ns) {
    unsigned long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (;;) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 >= ns) break;
    }
}
"""


@pytest.fixture(scope="module")
def handle() -> Iterator[cudecomp.Handle]:
    """The module's handle: small test arrays are exported too (the default keeps arrays
    under 1 MiB private), and single copies are the GPU variant's default."""
    if GPU and not gpu_available():
        pytest.skip("GPU variant without a usable GPU")
    with handle_with(CUDECOMP_SHARED_ARRAY_MIN_BYTES="0", CUDECOMP_SINGLE_COPY=None) as h:
        yield h


def slab_grid(handle: cudecomp.Handle, backend: TransposeCommBackend, contiguous: bool = False) -> cudecomp.GridDesc:
    c = cudecomp.GridDescConfig()
    c.gdims, c.pdims = GDIMS, (1, NRANKS)
    c.transpose_axis_contiguous = (contiguous,) * 3
    c.transpose_comm_backend = backend
    return handle.create_grid(c)


def pencils(g: cudecomp.GridDesc, dtype: DataType, library: bool, backward: bool) -> tuple[Any, Any, np.ndarray, np.ndarray]:
    """Zeroed input and output pencils of Y→Z (backward: Z→Y), library arrays or CuPy's, and their oracles."""
    import cupy

    a, b = (2, 1) if backward else (1, 2)
    want_in, want_out = make(g.get_pencil_info(a), GDIMS, dtype), make(g.get_pencil_info(b), GDIMS, dtype)
    if library:
        return g.zeros_pencil(a, dtype), g.zeros_pencil(b, dtype), want_in, want_out
    x, y = (cupy.zeros(g.get_pencil_info(axis).array_shape, want_in.dtype) for axis in (a, b))
    return x, y, want_in, want_out


def stepped_transpose(
    g: cudecomp.GridDesc, dtype: DataType, library: bool, steps: int, backward: bool = False
) -> tuple[Any, np.ndarray, int]:
    """Write the input in ``steps`` delayed slabs on a producer stream; transpose on another stream.

    Forward: Y→Z, the Y-pencil written in slabs of Z planes (its slowest axis); backward:
    Z→Y, the Z-pencil written in slabs of Y rows (``input_ready_axis=1``).
    """
    import cupy

    delay = cupy.RawKernel(DELAY, "delay")
    x, y, want_in, want_out = pencils(g, dtype, library, backward)
    src = cupy.asarray(want_in)
    cupy.cuda.Device().synchronize()
    producer, mover = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    n = x.shape[1] if backward else x.shape[0]
    cuts = [n * (j + 1) // steps for j in range(steps)]
    marks, lo = [], 0
    with producer:
        for hi in cuts:
            delay((1,), (1,), (np.uint64(2_000_000),))  # 2 ms before each slab lands
            if backward:
                x[:, lo:hi] = src[:, lo:hi]
            else:
                x[lo:hi] = src[lo:hi]
            e = cupy.cuda.Event(disable_timing=True)
            e.record(producer)
            marks.append((e, hi))
            lo = hi
    before = ext._single_copy_count()
    if backward:
        g.transpose_z_to_y(x, y, stream=mover.ptr, input_ready=marks, input_ready_axis=1)
    else:
        g.transpose_y_to_z(x, y, stream=mover.ptr, input_ready=marks)
    mover.synchronize()
    taken = ext._single_copy_count() - before
    producer.synchronize()
    return y, want_out, taken


@gpu_only
@pytest.mark.parametrize("steps", [1, 2, 3])
@pytest.mark.parametrize("dtype", [DataType.DOUBLE, DataType.DOUBLE_COMPLEX, DataType.FLOAT])
def test_direct_single_copy_waits_for_each_step(handle: cudecomp.Handle, dtype: DataType, steps: int) -> None:
    with slab_grid(handle, TransposeCommBackend.DIRECT) as g:
        y, want, taken = stepped_transpose(g, dtype, True, steps)
        assert np.array_equal(y.get(), want)
        # Whole rows of >= 4 KiB: the copy engine's single copy, by default.
        assert taken == int(NRANKS > 1)


@gpu_only
@pytest.mark.parametrize("steps", [1, 3])
def test_steps_along_a_middle_axis(handle: cudecomp.Handle, steps: int) -> None:
    # Z→Y with the Z-pencil written in slabs of Y rows: each step is a strided block of rows.
    with slab_grid(handle, TransposeCommBackend.DIRECT) as g:
        y, want, taken = stepped_transpose(g, DataType.DOUBLE_COMPLEX, True, steps, backward=True)
        assert np.array_equal(y.get(), want)
        assert taken == int(NRANKS > 1)


@gpu_only
@pytest.mark.parametrize(
    "backend", [TransposeCommBackend.DIRECT, TransposeCommBackend.MPI_P2P, TransposeCommBackend.MPI_A2A], ids=lambda b: b.name
)
def test_other_routes_wait_for_every_event(handle: cudecomp.Handle, backend: TransposeCommBackend) -> None:
    # User arrays: DIRECT's two copies; the MPI backends: staged through the host.
    with slab_grid(handle, backend) as g:
        y, want, taken = stepped_transpose(g, DataType.DOUBLE, False, 3)
        assert np.array_equal(y.get(), want)
        assert taken == 0


@gpu_only
def test_transposing_layouts_copy_twice_by_default(handle: cudecomp.Handle) -> None:
    # Z-fastest Z-pencils: every chunk is transposed, which the copy engine cannot do; copy
    # kernels into peers are taken only when asked (CUDECOMP_SINGLE_COPY=1).
    with slab_grid(handle, TransposeCommBackend.DIRECT, contiguous=True) as g:
        y, want, taken = stepped_transpose(g, DataType.DOUBLE, True, 2)
        assert np.array_equal(y.get(), want)
        assert taken == 0


def test_marks_are_checked(handle: cudecomp.Handle) -> None:
    with slab_grid(handle, TransposeCommBackend.DIRECT) as g:
        ia, ib = g.get_pencil_info(1), g.get_pencil_info(2)
        x = g.zeros_pencil(1, DataType.DOUBLE)
        y = g.zeros_pencil(2, DataType.DOUBLE)
        with pytest.raises(TypeError, match="input_ready"):
            g.transpose_y_to_z(x, y, input_ready=[1, 2])
        with pytest.raises(TypeError, match="input_ready"):
            g.transpose_y_to_z(x, y, input_ready=[("event", 1)])
        if not GPU:
            with pytest.raises(cudecomp.InvalidUsageError, match="host memory"):
                g.transpose_y_to_z(x, y, input_ready=[(1, 1)])
        else:
            import cupy

            e = cupy.cuda.Event(disable_timing=True)
            e.record()
            planes = ia.array_shape[0]
            with pytest.raises(cudecomp.InvalidUsageError, match="not decreasing"):
                g.transpose_y_to_z(x, y, input_ready=[(e, planes), (e, 0)])
            with pytest.raises(cudecomp.InvalidUsageError, match="at most"):
                g.transpose_y_to_z(x, y, input_ready=[(e, planes + 1)])
            with pytest.raises(cudecomp.InvalidUsageError, match="at most"):  # Y rows of the Y-pencil: all of Y
                g.transpose_y_to_z(x, y, input_ready=[(e, GDIMS[1] + 1)], input_ready_axis=1)
            with pytest.raises(cudecomp.InvalidUsageError, match="input_ready_axis"):
                g.transpose_y_to_z(x, y, input_ready=[(e, 1)], input_ready_axis=3)
            g.transpose_y_to_z(x, y, input_ready=[(e, planes)])  # the grid still works
            assert tuple(y.shape) == ib.array_shape
        g.transpose_y_to_z(x, y)


def landed_transpose(
    g: cudecomp.GridDesc, dtype: DataType, library: bool, ends: list[int], backward: bool = False, **kw: Any
) -> tuple[Any, np.ndarray, int]:
    """Transpose on a mover stream with ``output_ready`` marks at ``ends``; a consumer copies each step out as its event completes.

    Forward: Y→Z; backward: Z→Y; the steps run along the output's slowest axis (Z in
    both). Returns what the consumer copied, the oracle and the single copies taken.
    """
    import cupy

    delay = cupy.RawKernel(DELAY, "delay")
    x, y, want_in, want_out = pencils(g, dtype, library, backward)
    x[...] = cupy.asarray(want_in)
    seen = cupy.zeros_like(y)
    cupy.cuda.Device().synchronize()
    mover, consumer = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    marks = [(cupy.cuda.Event(disable_timing=True), e) for e in ends]
    with mover:
        delay((1,), (1,), (np.uint64(2_000_000),))  # the copies start 2 ms from now
    before = ext._single_copy_count()
    f = g.transpose_z_to_y if backward else g.transpose_y_to_z
    f(x, y, stream=mover.ptr, output_ready=marks, **kw)
    taken = ext._single_copy_count() - before
    lo = 0
    with consumer:
        for e, hi in marks:
            consumer.wait_event(e)
            seen[lo:hi] = y[lo:hi]
            lo = hi
    consumer.synchronize()
    mover.synchronize()
    seen[lo:] = y[lo:]  # the cells past the last step: when the operation is done
    return seen, want_out, taken


@gpu_only
@pytest.mark.parametrize("backward", [False, True], ids=["y_to_z", "z_to_y"])
@pytest.mark.parametrize("cuts", ["halves", "each", "partial", "many"])
def test_direct_single_copy_signals_each_output_step(handle: cudecomp.Handle, backward: bool, cuts: str) -> None:
    with slab_grid(handle, TransposeCommBackend.DIRECT) as g:
        n = g.get_pencil_info(1 if backward else 2).array_shape[0]  # Z planes of the output
        ends = {
            "halves": [n // 2, n],
            "each": list(range(1, n + 1)),
            "partial": [n // 2],  # the rest lands with the operation
            "many": sorted([j * n // 20 for j in range(1, 21)]),  # 20 steps: signalled in groups
        }[cuts]
        seen, want, taken = landed_transpose(g, DataType.DOUBLE_COMPLEX, True, ends, backward)
        assert np.array_equal(seen.get(), want)
        assert taken == int(NRANKS > 1)


@gpu_only
def test_input_and_output_steps_together(handle: cudecomp.Handle) -> None:
    import cupy

    with slab_grid(handle, TransposeCommBackend.DIRECT) as g:
        e = cupy.cuda.Event(disable_timing=True)
        e.record()
        planes = g.get_pencil_info(1).array_shape[0]
        seen, want, taken = landed_transpose(g, DataType.DOUBLE, True, [1, 3], input_ready=[(e, planes)])
        assert np.array_equal(seen.get(), want)
        assert taken == int(NRANKS > 1)


@gpu_only
@pytest.mark.parametrize(
    "backend", [TransposeCommBackend.DIRECT, TransposeCommBackend.MPI_P2P, TransposeCommBackend.NCCL], ids=lambda b: b.name
)
def test_other_routes_record_every_output_event_at_the_end(handle: cudecomp.Handle, backend: TransposeCommBackend) -> None:
    # User arrays: DIRECT's two copies; MPI_P2P staged through the host; NCCL.
    if backend == TransposeCommBackend.NCCL and not nccl_usable():
        pytest.skip("NCCL needs a GPU per rank")
    with slab_grid(handle, backend) as g:
        seen, want, taken = landed_transpose(g, DataType.DOUBLE, False, [2, 4])
        assert np.array_equal(seen.get(), want)
        assert taken == 0


def test_output_marks_are_checked(handle: cudecomp.Handle) -> None:
    with slab_grid(handle, TransposeCommBackend.DIRECT) as g:
        ib = g.get_pencil_info(2)
        x = g.zeros_pencil(1, DataType.DOUBLE)
        y = g.zeros_pencil(2, DataType.DOUBLE)
        with pytest.raises(TypeError, match="output_ready"):
            g.transpose_y_to_z(x, y, output_ready=[1, 2])
        with pytest.raises(TypeError, match="output_ready"):
            g.transpose_y_to_z(x, y, output_ready=7)
        if not GPU:
            with pytest.raises(cudecomp.InvalidUsageError, match="output_ready: expected no events for an operation on host memory"):
                g.transpose_y_to_z(x, y, output_ready=[(1, 1)])
        else:
            import cupy

            e = cupy.cuda.Event(disable_timing=True)
            planes = ib.array_shape[0]
            with pytest.raises(cudecomp.InvalidUsageError, match="not decreasing"):
                g.transpose_y_to_z(x, y, output_ready=[(e, planes), (e, 0)])
            with pytest.raises(cudecomp.InvalidUsageError, match=f"output's {planes} cells along axis 2"):
                g.transpose_y_to_z(x, y, output_ready=[(e, planes + 1)])
            with pytest.raises(cudecomp.InvalidUsageError, match="output_ready_axis"):
                g.transpose_y_to_z(x, y, output_ready=[(e, 1)], output_ready_axis=-1)
            g.transpose_y_to_z(x, y, output_ready=[(e, planes)])  # the grid still works
            e.synchronize()
        g.transpose_y_to_z(x, y)
