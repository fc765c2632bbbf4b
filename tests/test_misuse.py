"""The misuse catalogue: hostile and careless calls, each expected to raise the right
exception class on the right ranks, after which the handle must still work.

Runs serially and under mpiexec with any rank count. Cases where ranks disagree rely on
``CUDECOMP_CHECK_COLLECTIVES=1`` to raise on every rank instead of hanging: they are
marked ``checking`` and run where it is on (tests/conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_cpu_variant
from cudecomp import DataType, HaloCommBackend, TransposeCommBackend
from oracle import factor_pairs, make

pytestmark = [pytest.mark.mpi, requires_cpu_variant()]

COMM = MPI.COMM_WORLD
NRANKS = COMM.size
RANK = COMM.rank
PDIMS = factor_pairs(NRANKS)[-1]
GDIMS = (9, 10, 11)
BIG = 2**62
HUGE = 2**63 - 1
T_BACKENDS = [TransposeCommBackend.MPI_P2P, TransposeCommBackend.MPI_P2P_PL, TransposeCommBackend.MPI_A2A, TransposeCommBackend.DIRECT]
H_BACKENDS = [HaloCommBackend.MPI, HaloCommBackend.MPI_BLOCKING, HaloCommBackend.DIRECT]
Invalid = cudecomp.InvalidUsageError


def config(**kw: Any) -> cudecomp.GridDescConfig:
    c = cudecomp.GridDescConfig()
    c.gdims = GDIMS
    c.pdims = PDIMS
    for k, v in kw.items():
        setattr(c, k, v)
    return c


def still_works(handle: cudecomp.Handle, **kw: Any) -> None:
    """A fresh grid transposes oracle data exactly and updates halos."""
    with handle.create_grid(config(**kw)) as g:
        ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
        out = g.transpose_x_to_y(make(ia, GDIMS, DataType.DOUBLE))
        assert np.array_equal(out, make(ib, GDIMS, DataType.DOUBLE))
        h = g.get_pencil_info(0, (1, 1, 1))
        g.update_halos_x(np.zeros(h.array_shape), (1, 1, 1), (True, True, True), 1)


@pytest.fixture(scope="module")
def grids(handle: cudecomp.Handle) -> Iterator[dict[tuple[int, int], cudecomp.GridDesc]]:
    """One grid per (transpose backend, halo backend) pair, created once."""
    made = {}
    for t in T_BACKENDS:
        for h in H_BACKENDS:
            made[(int(t), int(h))] = handle.create_grid(config(transpose_comm_backend=t, halo_comm_backend=h))
    yield made
    for g in made.values():
        g.destroy()


BACKEND_PAIRS = [(t, h) for t in T_BACKENDS for h in H_BACKENDS]
PAIR_IDS = [f"{t.name}-{h.name}" for t, h in BACKEND_PAIRS]


def x_and_y(g: cudecomp.GridDesc) -> tuple[np.ndarray, np.ndarray]:
    ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
    return make(ia, GDIMS, DataType.DOUBLE), np.zeros(ib.array_shape)


def halo_array(g: cudecomp.GridDesc, halo: tuple[int, int, int] = (1, 1, 1)) -> np.ndarray:
    return np.zeros(g.get_pencil_info(0, halo).array_shape)


# ------------------------------------------------------------------ operation misuse, every backend

OperationCase = tuple[str, Callable[[cudecomp.GridDesc], object], type[Exception]]


def operation_cases() -> list[OperationCase]:
    def t(**kw: Any) -> Callable[[cudecomp.GridDesc], object]:
        def call(g: cudecomp.GridDesc) -> object:
            x, y = x_and_y(g)
            args = {"out": y}
            args.update(kw)
            inp = args.pop("input", x)
            if callable(inp):
                inp = inp(x)
            out = args.pop("out")
            if callable(out):
                out = out(y)
            return g.transpose_x_to_y(inp, out, **args)

        return call

    def h(*args: Any, input: Any = None, **kw: Any) -> Callable[[cudecomp.GridDesc], object]:
        def call(g: cudecomp.GridDesc) -> object:
            data = halo_array(g) if input is None else (input(g) if callable(input) else input)
            return g.update_halos_x(data, *args, **kw)

        return call

    small = np.zeros(3, np.uint8)
    return [
        ("work too small", t(work=small), Invalid),
        ("work empty", t(work=np.zeros(0, np.uint8)), Invalid),
        ("work read-only", t(work=_readonly(1 << 16)), Invalid),
        ("work is a list", t(work=[0] * 64), TypeError),
        ("work overlaps input", _work_overlaps_input, Invalid),
        ("work overlaps output", _work_overlaps_output, Invalid),
        ("dtype numpy", t(dtype=np.float64), TypeError),
        ("dtype string", t(dtype="float64"), TypeError),
        ("dtype int", t(dtype=-2), TypeError),
        ("dtype mismatch", t(dtype=DataType.FLOAT), Invalid),
        ("input list", t(input=lambda x: x.tolist()), TypeError),
        ("input None", t(input=lambda x: None), TypeError),
        ("input 2-D", t(input=lambda x: x.reshape(x.shape[0], -1)), Invalid),
        ("input transposed", t(input=lambda x: np.ascontiguousarray(np.swapaxes(x, 0, 2))), Invalid),
        ("input int32", t(input=lambda x: x.astype(np.int32), out=lambda y: y.astype(np.int32)), Invalid),
        ("input big-endian", t(input=lambda x: x.astype(">f8")), Invalid),
        ("input strided", t(input=lambda x: np.repeat(x, 2, axis=2)[:, :, ::2]), Invalid),
        ("out read-only", t(out=lambda y: _ro(y)), Invalid),
        ("out wrong shape", t(out=lambda y: np.zeros(y.size + 1)[: y.size].reshape(1, 1, -1)), Invalid),
        ("out float32", t(out=lambda y: y.astype(np.float32)), Invalid),
        ("out partial overlap", _partial_overlap, Invalid),
        ("halo extents negative", t(input_halo_extents=(0, -1, 0)), Invalid),
        ("halo extents too short", t(output_halo_extents=(1, 1)), Invalid),
        ("halo extents huge", t(input_halo_extents=(BIG, 0, 0)), Invalid),
        ("halo extents float", t(input_halo_extents=(0.5, 0, 0)), TypeError),
        ("halo extents bool", t(input_halo_extents=(True, 0, 0)), TypeError),
        ("padding negative", t(output_padding=(0, 0, -3)), Invalid),
        ("padding huge", t(input_padding=(0, HUGE, 0)), Invalid),
        ("padding string", t(input_padding="abc"), TypeError),
        ("halo mismatch with array", t(input_halo_extents=(1, 0, 0)), Invalid),
        ("halo update dim 7", h((1, 1, 1), None, 7), Invalid),
        ("halo update dim -1", h((1, 1, 1), None, -1), Invalid),
        ("halo update dim float", h((1, 1, 1), None, 1.0), TypeError),
        ("halo update dim bool", h((1, 1, 1), None, True), TypeError),
        ("halo update zero extents, junk input", h((0, 0, 0), None, 0, input="junk"), TypeError),
        ("halo update zero extents, dim 7", h((0, 0, 0), None, 7), Invalid),
        ("halo update extents None", h(None, None, 0), Invalid),
        ("halo update extents negative", h((1, -1, 1), None, 0), Invalid),
        ("halo update extents huge", h((1, BIG, 1), None, 1), Invalid),
        ("halo update periods ints", h((1, 1, 1), (2, 0, 0), 0), TypeError),
        ("halo update periods short", h((1, 1, 1), (True, False), 0), Invalid),
        ("halo update wrong shape", h((1, 1, 1), (True,) * 3, 0, input=lambda g: np.zeros(g.get_pencil_info(0).array_shape)), Invalid),
        ("halo update read-only", h((1, 1, 1), (True, True, True), 0, input=lambda g: _ro(halo_array(g))), Invalid),
        ("halo update work too small", h((1, 1, 1), (True, True, True), 1, work=np.zeros(3, np.uint8)), Invalid),
        ("halo update work list", h((1, 1, 1), None, 0, work=[1, 2]), TypeError),
        ("halo update dtype numpy", h((1, 1, 1), None, 0, dtype=np.float64), TypeError),
    ]


def _readonly(n: int) -> np.ndarray:
    a = np.zeros(n, np.uint8)
    a.flags.writeable = False
    return a


def _ro(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def _work_overlaps_input(g: cudecomp.GridDesc) -> object:
    x, y = x_and_y(g)
    return g.transpose_x_to_y(x, y, work=x.reshape(-1).view(np.uint8))


def _work_overlaps_output(g: cudecomp.GridDesc) -> object:
    x, y = x_and_y(g)
    return g.transpose_x_to_y(x, y, work=y.reshape(-1).view(np.uint8))


def _partial_overlap(g: cudecomp.GridDesc) -> object:
    x, _ = x_and_y(g)
    ib = g.get_pencil_info(1)
    buf = np.zeros(x.size + int(np.prod(ib.array_shape)) + 1)
    buf[: x.size] = x.reshape(-1)
    return g.transpose_x_to_y(buf[: x.size].reshape(x.shape), buf[1 : 1 + ib.size].reshape(ib.array_shape))


OPS = operation_cases()


@pytest.mark.parametrize("pair", BACKEND_PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("name, call, exc", OPS, ids=[c[0] for c in OPS])
def test_operation_misuse(
    handle: cudecomp.Handle,
    grids: dict[tuple[int, int], cudecomp.GridDesc],
    pair: tuple[TransposeCommBackend, HaloCommBackend],
    name: str,
    call: Callable[[cudecomp.GridDesc], object],
    exc: type[Exception],
) -> None:
    g = grids[(int(pair[0]), int(pair[1]))]
    with pytest.raises(exc):
        call(g)
    # The same grid still moves data exactly.
    x, y = x_and_y(g)
    assert np.array_equal(g.transpose_x_to_y(x, y), make(g.get_pencil_info(1), GDIMS, DataType.DOUBLE))


# ------------------------------------------------------------------ ranks that disagree (checking mode)


def disagreeing_cases() -> list[tuple[str, Callable[[cudecomp.GridDesc], object]]]:
    odd = RANK == NRANKS - 1

    def xy(**kw: Any) -> Callable[[cudecomp.GridDesc], object]:
        def call(g: cudecomp.GridDesc) -> object:
            lay = kw if odd else {}
            ia = g.get_pencil_info(0, lay.get("input_halo_extents"), lay.get("input_padding"))
            ib = g.get_pencil_info(1, lay.get("output_halo_extents"), lay.get("output_padding"))
            dtype = lay.get("dtype_np", np.float64)
            x = np.zeros(ia.array_shape, dtype)
            y = np.zeros(ib.array_shape, dtype)
            args = {k: v for k, v in lay.items() if k != "dtype_np"}
            return g.transpose_x_to_y(x, y, **args)

        return call

    def halo(extents: tuple[int, int, int], periods: Any, dim: int) -> Callable[[cudecomp.GridDesc], object]:
        def call(g: cudecomp.GridDesc) -> object:
            e, p, d = (extents, periods, dim) if odd else ((1, 1, 1), (True, True, True), 1)
            return g.update_halos_x(np.zeros(g.get_pencil_info(0, e).array_shape), e, p, d)

        return call

    def other_op(g: cudecomp.GridDesc) -> object:
        if odd:
            iy, iz = g.get_pencil_info(1), g.get_pencil_info(2)
            return g.transpose_y_to_z(np.zeros(iy.array_shape), np.zeros(iz.array_shape))
        x, y = x_and_y(g)
        return g.transpose_x_to_y(x, y)

    def in_place(g: cudecomp.GridDesc) -> object:
        ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
        if odd:
            buf = np.zeros(max(ia.size, ib.size))
            return g.transpose_x_to_y(buf[: ia.size].reshape(ia.array_shape), buf[: ib.size].reshape(ib.array_shape))
        return g.transpose_x_to_y(np.zeros(ia.array_shape), np.zeros(ib.array_shape))

    def local_error(g: cudecomp.GridDesc) -> object:
        x, y = x_and_y(g)
        return g.transpose_x_to_y(x.tolist() if odd else x, y)

    def small_work(g: cudecomp.GridDesc) -> object:
        x, y = x_and_y(g)
        n = g.get_transpose_workspace_size() * 8
        return g.transpose_x_to_y(x, y, work=np.zeros(3 if odd else n, np.uint8))

    def small_halo_work(g: cudecomp.GridDesc) -> object:
        n = g.get_halo_workspace_size(0, (1, 1, 1)) * 8
        return g.update_halos_x(halo_array(g), (1, 1, 1), (True, True, True), 1, work=np.zeros(3 if odd else n, np.uint8))

    def keyword(**kw: Any) -> Callable[[cudecomp.GridDesc], object]:
        """X->Y where only the last rank passes ``kw`` (arguments that fail there)."""

        def call(g: cudecomp.GridDesc) -> object:
            x, y = x_and_y(g)
            return g.transpose_x_to_y(x, y, **(kw if odd else {}))

        return call

    def wrong_halo_array(g: cudecomp.GridDesc) -> object:
        # Nothing moves with zero extents, but the array is checked first, on every rank.
        data = np.zeros((1, 2, 3)) if odd else halo_array(g, (0, 0, 0))
        return g.update_halos_x(data, (0, 0, 0), None, 0)

    return [
        ("dtype", xy(dtype_np=np.float32)),
        ("input halo", xy(input_halo_extents=(1, 0, 0))),
        ("output halo", xy(output_halo_extents=(0, 1, 1))),
        ("input padding", xy(input_padding=(0, 0, 2))),
        ("output padding", xy(output_padding=(1, 0, 0))),
        ("halo extents", halo((2, 2, 2), (True, True, True), 1)),
        ("halo periods", halo((1, 1, 1), (False, True, True), 1)),
        ("halo dim", halo((1, 1, 1), (True, True, True), 2)),
        ("direction", other_op),
        ("in-place on one rank", in_place),
        ("argument error on one rank", local_error),
        ("work too small on one rank", small_work),
        ("halo work too small on one rank", small_halo_work),
        ("input_ready a string on one rank", keyword(input_ready="soon")),
        ("input_ready_axis a string on one rank", keyword(input_ready_axis="z")),
        ("output_ready_axis 7 on one rank", keyword(output_ready_axis=7)),
        ("own_cells a string on one rank", keyword(own_cells="no")),
        ("zero-extent halo update of a wrong array on one rank", wrong_halo_array),
    ]


#: What the failing (last) rank raises itself, where it is not InvalidUsageError; every
#: other rank raises InvalidUsageError naming it.
OWN_ERROR = {
    "argument error on one rank": TypeError,
    "input_ready a string on one rank": TypeError,
    "input_ready_axis a string on one rank": TypeError,
    "own_cells a string on one rank": TypeError,
}


DIS = disagreeing_cases()


@pytest.mark.checking
@pytest.mark.skipif(NRANKS < 2, reason="needs several ranks")
@pytest.mark.parametrize("backend", T_BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("name, call", DIS, ids=[c[0] for c in DIS])
def test_ranks_disagreeing_raise_everywhere(
    handle: cudecomp.Handle, backend: TransposeCommBackend, name: str, call: Callable[[cudecomp.GridDesc], object]
) -> None:
    with handle.create_grid(config(transpose_comm_backend=backend, halo_comm_backend=HaloCommBackend.MPI)) as g:
        with pytest.raises((Invalid, TypeError)) as e:
            call(g)
        want = OWN_ERROR.get(name, Invalid) if RANK == NRANKS - 1 else Invalid
        assert e.type is want, (name, e.value)
        if RANK != NRANKS - 1 and name in OWN_ERROR:
            assert f"rank {NRANKS - 1} failed" in str(e.value), e.value
    still_works(handle, transpose_comm_backend=backend)


@pytest.mark.checking
@pytest.mark.skipif(NRANKS < 2, reason="needs several ranks")
def test_destroy_on_one_rank_raises_everywhere(handle: cudecomp.Handle) -> None:
    """In checking mode a grid is destroyed only when every rank destroys it: one rank's
    destroy beside the others' transpose fails on every rank, and the grid lives on."""
    g = handle.create_grid(config())
    with pytest.raises(Invalid, match="ranks disagree"):
        if RANK == NRANKS - 1:
            g.destroy()
        else:
            g.transpose_x_to_y(*x_and_y(g))
    x, y = x_and_y(g)
    assert np.array_equal(g.transpose_x_to_y(x, y), make(g.get_pencil_info(1), GDIMS, DataType.DOUBLE))
    g.destroy()
    with pytest.raises(Invalid, match="destroyed"):
        g.destroy()


def test_argument_messages_name_what_they_got(handle: cudecomp.Handle) -> None:
    with handle.create_grid(config()) as g:
        x, y = x_and_y(g)
        with pytest.raises(TypeError, match=r"own_cells: expected True or False, got 'no' \(str\)"):
            g.transpose_x_to_y(x, y, own_cells="no")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"input_ready: .* got the str 'soon'"):
            g.transpose_x_to_y(x, y, input_ready="soon")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="input_ready_axis: expected an int, got str"):
            g.transpose_x_to_y(x, y, input_ready_axis="z")  # type: ignore[arg-type]
        assert g.transpose_x_to_y(x, y, own_cells=np.bool_(True)) is y


# ------------------------------------------------------------------ sizes and indices that overflow


@pytest.mark.parametrize(
    "gdims",
    [(2**31 - 1,) * 3, (2**31 - 1, 2**31 - 1, 16), (2**30, 2**30, 2**10)],
    ids=["int32-max-cube", "int32-max-plane", "2^70-cells"],
)
def test_grid_too_large(handle: cudecomp.Handle, gdims: tuple[int, int, int]) -> None:
    with pytest.raises(Invalid, match="gdims.*2\\^58"):
        handle.create_grid(config(gdims=gdims, pdims=(1, NRANKS)))
    still_works(handle)


@pytest.mark.parametrize(
    "args",
    [
        (0, (HUGE, 0, 0), (2, 0, 0)),
        (0, (BIG, 0, 0), None),
        (1, (0, 2**40, 0), None),
        (2, None, (0, 0, HUGE)),
        (0, (2**31, 0, 0), None),
        (0, (0, 0, 0), (2**31, 0, 0)),
        (1, (2**30, 2**30, 0), None),
    ],
)
def test_pencil_info_overflow(handle: cudecomp.Handle, args: tuple[Any, ...]) -> None:
    with handle.create_grid(config()) as g:
        with pytest.raises(Invalid):
            g.get_pencil_info(*args)
        if args[1] is not None and any(args[1]):
            with pytest.raises(Invalid):
                g.get_halo_workspace_size(args[0], args[1])
    still_works(handle)


def test_halo_overflow_in_operations(handle: cudecomp.Handle) -> None:
    with handle.create_grid(config(gdims=(8, 2 * NRANKS, 2 * NRANKS))) as g:
        for extents in [(BIG, 0, 0), (0, 0, BIG), (HUGE, HUGE, HUGE)]:
            with pytest.raises(Invalid):
                g.transpose_x_to_y(np.zeros(1), np.zeros(1), input_halo_extents=extents)
            with pytest.raises(Invalid):
                g.update_halos_x(np.zeros(1), extents, None, 0)
    still_works(handle)


@pytest.mark.parametrize("disp", [HUGE, -HUGE - 1, 2**40 + 1, -(2**40) - 1, 3 * NRANKS + 1])
@pytest.mark.parametrize("periodic", [True, False])
def test_shifted_rank_large_displacements(handle: cudecomp.Handle, disp: int, periodic: bool) -> None:
    with handle.create_grid(config(pdims=(NRANKS, 1))) as g:
        got = g.get_shifted_rank(0, 1, disp, periodic)
        coord = RANK  # pdims (N, 1): Y is split over the ranks in rank order
        want = (coord + disp) % NRANKS if periodic else ((coord + disp) if 0 <= coord + disp < NRANKS else -1)
        assert got == want
        with pytest.raises(TypeError):
            g.get_shifted_rank(0, 1, float(disp), periodic)


# ------------------------------------------------------------------ configuration types


@pytest.mark.parametrize(
    "field, index, value, exc",
    [
        ("gdims", 0, 4.9, TypeError),
        ("gdims", 0, 4.0, TypeError),
        ("gdims", 1, True, TypeError),
        ("gdims", slice(None), (1.5, 2, 3), TypeError),
        ("gdims", slice(0, 2), [True, 1], TypeError),
        ("gdims", 2, 2**40, Invalid),
        ("gdims", 0, "7", TypeError),
        ("gdims", 0, None, TypeError),
        ("pdims", 0, 2.5, TypeError),
        ("pdims", slice(None), np.array([1.0, 2.0]), TypeError),
        ("gdims_dist", 1, np.float64(3.0), TypeError),
        ("transpose_axis_contiguous", 0, 2, TypeError),
        ("transpose_axis_contiguous", 0, 0.5, TypeError),
        ("transpose_mem_order", (0, 0), 1.5, TypeError),
        ("transpose_mem_order", 1, (0.0, 1, 2), TypeError),
    ],
)
def test_config_view_writes(field: str, index: Any, value: Any, exc: type[Exception]) -> None:
    c = cudecomp.GridDescConfig()
    before = c.copy()
    view = getattr(c, field)
    with pytest.raises(exc):
        view[index] = value
    assert c == before


def test_config_fill_and_unknown_fields() -> None:
    # Views' fill() is checked like an assignment; a misspelt field raises (naming the
    # closest one) instead of becoming an attribute while the real setting keeps its default.
    c = cudecomp.GridDescConfig()
    before = c.copy()
    with pytest.raises(TypeError, match="gdims"):
        c.gdims.fill(2.7)
    with pytest.raises(TypeError, match="transpose_axis_contiguous"):
        c.transpose_axis_contiguous.fill(5)
    with pytest.raises(AttributeError, match="did you mean 'pdims'"):
        c.pdim = (2, 2)  # type: ignore[attr-defined]
    assert c == before
    c.gdims.fill(4)
    assert tuple(c.gdims) == (4, 4, 4)
    o = cudecomp.GridDescAutotuneOptions()
    with pytest.raises(AttributeError, match="did you mean 'n_trials'"):
        o.n_trial = 5  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "field, value, exc",
    [
        ("n_trials", 2.5, TypeError),
        ("n_trials", True, TypeError),
        ("n_warmup_trials", "3", TypeError),
        ("skip_threshold", "x", TypeError),
        ("skip_threshold", True, TypeError),
        ("autotune_transpose_backend", 1, TypeError),
        ("dtype", np.float64, TypeError),
        ("grid_mode", 1, TypeError),
        ("transpose_op_weights", (1, 2, 3), Invalid),
        ("transpose_op_weights", (1, "a", 3, 4), TypeError),
        ("halo_periods", (2, 0, 0), TypeError),
        ("halo_extents", (1.5, 0, 0), TypeError),
        ("halo_axis", 1.0, TypeError),
        ("transpose_input_halo_extents", np.zeros((4, 2), int), Invalid),
    ],
)
def test_options_types(field: str, value: Any, exc: type[Exception]) -> None:
    o = cudecomp.GridDescAutotuneOptions()
    with pytest.raises(exc):
        setattr(o, field, value)


# ------------------------------------------------------------------ autotuning options' values


def quick(**kw: Any) -> cudecomp.GridDescAutotuneOptions:
    o = cudecomp.GridDescAutotuneOptions()
    o.n_warmup_trials, o.n_trials = 1, 1
    for k, v in kw.items():
        setattr(o, k, v)
    return o


@pytest.mark.parametrize(
    "options, match",
    [
        ({"n_trials": -1}, "n_trials"),
        ({"n_trials": 0}, "n_trials"),
        ({"n_warmup_trials": -5}, "n_warmup_trials"),
        ({"transpose_op_weights": (float("nan"), 1, 1, 1)}, "transpose_op_weights"),
        ({"transpose_op_weights": (-1.0, 1, 1, 1)}, "transpose_op_weights"),
        ({"transpose_op_weights": (0, 0, 0, 0)}, "transpose_op_weights"),
        ({"transpose_op_weights": (float("inf"), 1, 1, 1)}, "transpose_op_weights"),
        ({"skip_threshold": -0.5}, "skip_threshold"),
        ({"skip_threshold": float("nan")}, "skip_threshold"),
        ({"halo_axis": 3}, "halo_axis"),
        ({"halo_axis": -1}, "halo_axis"),
        ({"halo_extents": (-1, 0, 0)}, "halo_extents"),
        ({"halo_padding": (0, -2, 0)}, "halo_padding"),
        ({"transpose_input_halo_extents": [[-1, 0, 0]] * 4}, "transpose_input_halo_extents"),
        ({"transpose_output_padding": [[0, 0, -1]] * 4}, "transpose_output_padding"),
        ({"disable_mpi_backends": True, "disable_nccl_backends": True, "disable_nvshmem_backends": True}, "disabled"),
    ],
)
@pytest.mark.parametrize("search", ["pdims", "backends", "none"])
def test_autotune_option_values(handle: cudecomp.Handle, options: dict[str, Any], match: str, search: str) -> None:
    if search == "none" and match == "disabled":
        pytest.skip("disabling every backend family only matters to a backend search")
    cfg = config()
    if search == "pdims":
        cfg.pdims = (0, 0)
    with pytest.raises(Invalid, match=match):
        handle.create_grid(cfg, quick(autotune_transpose_backend=search == "backends", **options))
    still_works(handle)


# ------------------------------------------------------------------ explicit workspaces, every backend


@pytest.mark.parametrize("backend", T_BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("size", [0, 3, 8, "one short"])
def test_small_explicit_work_every_backend(handle: cudecomp.Handle, backend: TransposeCommBackend, size: Any) -> None:
    with handle.create_grid(config(transpose_comm_backend=backend)) as g:
        need = g.get_transpose_workspace_size() * 8
        n = need - 1 if size == "one short" else size
        x, y = x_and_y(g)
        with pytest.raises(Invalid, match="work"):
            g.transpose_x_to_y(x, y, work=np.zeros(n, np.uint8))
        out = g.transpose_x_to_y(x, y, work=np.zeros(need, np.uint8))
        assert np.array_equal(out, make(g.get_pencil_info(1), GDIMS, DataType.DOUBLE))


@pytest.mark.parametrize("backend", H_BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("size", [0, 3, "one short"])
def test_small_explicit_halo_work_every_backend(handle: cudecomp.Handle, backend: HaloCommBackend, size: Any) -> None:
    with handle.create_grid(config(halo_comm_backend=backend)) as g:
        need = g.get_halo_workspace_size(0, (1, 1, 1)) * 8
        n = need - 1 if size == "one short" else size
        with pytest.raises(Invalid, match="work"):
            g.update_halos_x(halo_array(g), (1, 1, 1), (True, True, True), 1, work=np.zeros(n, np.uint8))
        g.update_halos_x(halo_array(g), (1, 1, 1), (True, True, True), 1, work=np.zeros(need, np.uint8))


# ------------------------------------------------------------------ halos wider than a neighbour's pencil


@pytest.mark.skipif(NRANKS != 3, reason="the reported layout needs 3 ranks (pencils 2, 2, 1)")
@pytest.mark.parametrize("backend", H_BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("periodic", [False, True])
def test_halo_wider_than_a_neighbour(handle: cudecomp.Handle, backend: HaloCommBackend, periodic: bool) -> None:
    with handle.create_grid(config(gdims=(5, 5, 12), pdims=(3, 1), halo_comm_backend=backend)) as g:
        info = g.get_pencil_info(0, (0, 2, 0))
        with pytest.raises(Invalid, match="exceeds"):
            g.update_halos_x(np.zeros(info.array_shape), (0, 2, 0), (False, periodic, False), 1)
    still_works(handle, halo_comm_backend=backend)


def test_halo_wider_than_the_pencil_any_ranks(handle: cudecomp.Handle) -> None:
    # Y split over all ranks into pencils of 2 cells: a halo of 3 exceeds every one.
    with handle.create_grid(config(gdims=(4, 2 * NRANKS, 4), pdims=(NRANKS, 1))) as g:
        info = g.get_pencil_info(0, (0, 3, 0))
        with pytest.raises(Invalid, match="exceeds"):
            g.update_halos_x(np.zeros(info.array_shape), (0, 3, 0), (False, True, False), 1)
    still_works(handle)


# ------------------------------------------------------------------ handles and communicators


def test_intercommunicator_rejected() -> None:
    if NRANKS < 2:
        pytest.skip("an intercommunicator needs two groups")
    local = COMM.Split(RANK % 2, RANK)
    inter = local.Create_intercomm(0, COMM, 1 - RANK % 2, tag=7)
    with pytest.raises(Invalid, match="intercommunicator"):
        cudecomp.Handle(inter)
    inter.Free()
    local.Free()


@pytest.mark.parametrize("bad", [None, 0, "world", 1.5, [COMM], object()])
def test_handle_argument_types(bad: Any) -> None:
    with pytest.raises(TypeError):
        cudecomp.Handle(bad)


def test_comm_null_rejected() -> None:
    with pytest.raises(Invalid):
        cudecomp.Handle(MPI.COMM_NULL)


def test_grid_of_another_handle(handle: cudecomp.Handle) -> None:
    with cudecomp.Handle(COMM) as other:
        with other.create_grid(config()) as g:
            with pytest.raises(Invalid):
                handle.malloc(g, 16)
            with pytest.raises(Invalid):
                handle.free(g, None)
    still_works(handle)


@pytest.mark.parametrize("n", [0, -1, -(2**40)])
def test_malloc_sizes(handle: cudecomp.Handle, n: int) -> None:
    with handle.create_grid(config()) as g:
        with pytest.raises(Invalid):
            handle.malloc(g, n)
        with pytest.raises(TypeError):
            handle.malloc(g, float(n))
    still_works(handle)


def test_use_after_destroy_every_method(handle: cudecomp.Handle) -> None:
    g = handle.create_grid(config())
    x, y = x_and_y(g)
    g.destroy()
    calls: list[Callable[[], object]] = [
        g.destroy,
        lambda: g.config,
        lambda: g.get_pencil_info(0),
        g.get_transpose_workspace_size,
        lambda: g.get_halo_workspace_size(0, (1, 1, 1)),
        lambda: g.get_shifted_rank(0, 1, 1, True),
        lambda: g.transpose_x_to_y(x, y),
        lambda: g.transpose_y_to_z(y, y),
        lambda: g.transpose_z_to_y(y, y),
        lambda: g.transpose_y_to_x(y, x),
        lambda: g.update_halos_x(x, (1, 1, 1), None, 0),
        lambda: g.update_halos_y(y, (1, 1, 1), None, 0),
        lambda: g.update_halos_z(y, (1, 1, 1), None, 0),
        lambda: g.empty_pencil(0, DataType.DOUBLE),
        lambda: g.zeros_pencil(0, DataType.DOUBLE),
    ]
    for call in calls:
        with pytest.raises(Invalid):
            call()
    still_works(handle)


def test_use_after_finalize_every_method() -> None:
    h = cudecomp.Handle(COMM)
    g = h.create_grid(config())
    x, y = x_and_y(g)
    h.finalize()
    calls: list[Callable[[], object]] = [
        h.finalize,
        h.one_node,
        lambda: h.create_grid(config()),
        lambda: h.malloc(g, 16),
        lambda: h.free(g, None),
        g.destroy,
        lambda: g.get_pencil_info(0),
        lambda: g.transpose_x_to_y(x, y),
        lambda: g.update_halos_x(x, (1, 1, 1), None, 0),
    ]
    for call in calls:
        with pytest.raises(Invalid):
            call()


@pytest.mark.parametrize("value", ["2", "yes", "-1", "true"])
def test_check_collectives_values(handle: cudecomp.Handle, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    # Read when a handle is created: the new one fails on every rank, the old one works on.
    monkeypatch.setenv("CUDECOMP_CHECK_COLLECTIVES", value)
    with pytest.raises(Invalid, match="CUDECOMP_CHECK_COLLECTIVES"):
        cudecomp.Handle(MPI.COMM_WORLD)
    monkeypatch.setenv("CUDECOMP_CHECK_COLLECTIVES", "1")
    still_works(handle)


@pytest.mark.skipif(NRANKS < 2, reason="needs several ranks")
def test_check_collectives_must_agree(handle: cudecomp.Handle, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDECOMP_CHECK_COLLECTIVES", "0" if RANK == 0 else "1")
    with pytest.raises(Invalid, match="CUDECOMP_CHECK_COLLECTIVES is false on rank 0 and true on rank 1"):
        cudecomp.Handle(MPI.COMM_WORLD)
    monkeypatch.setenv("CUDECOMP_CHECK_COLLECTIVES", "1")
    still_works(handle)


@pytest.mark.skipif(NRANKS < 2, reason="needs several ranks")
@pytest.mark.parametrize("with_options", [False, True], ids=["plain", "autotune"])
def test_create_grid_argument_error_on_one_rank(handle: cudecomp.Handle, with_options: bool) -> None:
    # The rank whose arguments do not parse raises its own TypeError; the others, already
    # in the creation's agreement, raise InvalidUsageError naming it instead of waiting.
    opts = cudecomp.GridDescAutotuneOptions() if with_options else None
    if RANK == NRANKS - 1:
        with pytest.raises(TypeError):
            handle.create_grid(None, opts)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="autotune_options"):
            handle.create_grid(config(), "options")  # type: ignore[arg-type]
    else:
        for _ in range(2):
            with pytest.raises(Invalid, match=f"rank {NRANKS - 1} failed in .*TypeError"):
                handle.create_grid(config(), opts)
    still_works(handle)


# ------------------------------------------------------------------ MPI finalized (child interpreter)


@pytest.mark.skipif(NRANKS > 1, reason="runs a child interpreter; one rank is enough")
def test_calls_after_mpi_finalize() -> None:
    code = textwrap.dedent(
        """
        import numpy as np
        from mpi4py import MPI
        import cudecomp
        c = cudecomp.GridDescConfig(); c.gdims = (4, 4, 4); c.pdims = (1, 1)
        h = cudecomp.Handle(MPI.COMM_WORLD)
        g = h.create_grid(c)
        x = np.zeros(g.get_pencil_info(0).array_shape)
        MPI.Finalize()
        for name, call in [
            ("transpose", lambda: g.transpose_x_to_y(x, x)),
            ("halo", lambda: g.update_halos_x(x, (1, 1, 1), None, 0)),
            ("destroy", g.destroy),
            ("create_grid", lambda: h.create_grid(c)),
            ("finalize", h.finalize),
            ("Handle", lambda: cudecomp.Handle(MPI.COMM_WORLD)),
        ]:
            try:
                call()
                print(name, "no error")
            except cudecomp.InvalidUsageError:
                print(name, "InvalidUsageError")
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "PMIX", "HYDRA", "OMPI_COMM", "OMPI_MCA", "PRTE"))}
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    for name in ("transpose", "halo", "destroy", "create_grid", "finalize", "Handle"):
        assert f"{name} InvalidUsageError" in lines, r.stdout + r.stderr
