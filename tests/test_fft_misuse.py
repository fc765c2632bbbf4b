"""Hostile and careless use of cudecomp.fft plans: each case expects the right exception
class on every rank, no rank left waiting, and the plan (or the handle) working afterwards.

Runs serially and under mpiexec with any rank count; the cases where ranks differ need
two or more. The cases of one rank's error rely on ``CUDECOMP_CHECK_COLLECTIVES=1``:
they are marked ``checking`` and run where it is on (tests/conftest.py); the cases that
turn it off say so.
"""

from __future__ import annotations

import gc
import re
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import gpu_available, handle_with, requires_data_path
from cudecomp import TransposeCommBackend
from cudecomp.fft import FFT
from oracle import device, factor_pairs, to_host, xp

pytestmark = [pytest.mark.mpi, requires_data_path()]

COMM = MPI.COMM_WORLD
NRANKS = COMM.size
RANK = COMM.rank
LAST = NRANKS - 1
PDIMS = factor_pairs(NRANKS)
GDIMS = (12, 6, 6)  # every process grid of 1-6 ranks leaves every pencil non-empty (r2c: 7 spectral X)
THREADS_GDIMS = (16, 12, 12)  # calls long enough for two threads' calls to overlap
Invalid = cudecomp.InvalidUsageError
BACKENDS = [TransposeCommBackend.MPI_P2P, TransposeCommBackend.DIRECT]
several = pytest.mark.skipif(NRANKS < 2, reason="needs several ranks")
threads_ok = pytest.mark.skipif(MPI.Query_thread() < MPI.THREAD_MULTIPLE, reason="MPI without MPI_THREAD_MULTIPLE")
# On one H200 (CuPy 14.2, CUDA 13) cuFFT through CuPy fails (CUFFT_EXEC_FAILED) in a thread
# other than the main one, without this package in the way (docs/threading.md).
cpu_threads = pytest.mark.skipif(not cudecomp.CPU_ONLY, reason="cuFFT through CuPy fails outside the main thread")
FAILED = f"rank {LAST} failed in cudecomp.fft.FFT calls"


def local_part(glob: np.ndarray, info: cudecomp.PencilInfo) -> np.ndarray:
    """This rank's pencil array cut out of a global array ``glob[z, y, x]``."""
    return np.ascontiguousarray(glob[info.global_slices].transpose(np.argsort(info.to_global_axes)))


def gather(local: Any, info: cudecomp.PencilInfo, shape: tuple[int, ...]) -> np.ndarray:
    """The global array ``[z, y, x]`` assembled from every rank's pencil."""
    out = np.zeros(shape, local.dtype)
    for gs, axes, part in COMM.allgather((info.global_slices, info.to_global_axes, to_host(local)[info.interior_slices])):
        out[gs] = part.transpose(axes)
    return out


def rel(a: Any, b: Any) -> float:
    a, b = to_host(a), to_host(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def field(plan: FFT, seed: int = 0) -> np.ndarray:
    """A random global real-space field of the plan's type (the same on every rank)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(plan.gdims[::-1])
    if plan.kind == "c2c":
        a = a + 1j * rng.standard_normal(plan.gdims[::-1])
    return a.astype(plan.input_dtype)


def pair(plan: FFT, seed: int = 0) -> tuple[Any, Any]:
    """(this rank's input pencil, its spectral pencil computed by one thread): what later calls must reproduce."""
    a = device(local_part(field(plan, seed), plan.input_info))
    return a, plan.forward(a)


def still_works(plan: FFT) -> None:
    """The plan's forward equals numpy.fft on the gathered field, and backward returns the input."""
    A = field(plan, 7)
    a = device(local_part(A, plan.input_info))
    spec = plan.forward(a)
    fwd = np.fft.rfftn if plan.kind == "r2c" else np.fft.fftn
    ref = fwd(A.astype(np.float64 if plan.kind == "r2c" else np.complex128), norm=plan.norm)
    assert rel(gather(spec, plan.output_info, ref.shape), ref) < 1e-12, "forward"
    assert rel(plan.backward(spec), a) < 1e-12, "round trip"


def handle_works(handle: cudecomp.Handle) -> None:
    """A fresh plan on the handle transforms correctly (the handle survived the misuse)."""
    with FFT(handle, GDIMS, PDIMS[-1], kind="r2c") as plan:
        still_works(plan)


@pytest.fixture
def unchecked() -> Iterator[cudecomp.Handle]:
    """A handle (so grids and plans) without the checking mode, read when it is made."""
    with handle_with(CUDECOMP_CHECK_COLLECTIVES="0") as h:
        yield h


def run_threads(targets: list[Callable[[], None]]) -> None:
    """Run each target on a thread of its own and wait for all (failing if any hangs)."""
    threads = [threading.Thread(target=t, daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "the threads deadlocked"


# ------------------------------------------------------------------ one plan from two threads (item 1)


@threads_ok
@cpu_threads
@pytest.mark.parametrize("checking", [True, False], ids=["checking", "unchecked"])
@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("kind", ["c2c", "r2c"])
# A slab grid and the squarest one: the threads' turns do not depend on the grid's shape.
@pytest.mark.parametrize("pdims", sorted({PDIMS[0], PDIMS[len(PDIMS) // 2]}), ids=lambda p: f"{p[0]}x{p[1]}")
def test_one_plan_from_two_threads(
    handle: cudecomp.Handle,
    unchecked: cudecomp.Handle,
    checking: bool,
    backend: TransposeCommBackend,
    kind: str,
    pdims: tuple[int, int],
) -> None:
    # Two threads calling the same transform of one plan with the same data: the calls
    # take turns, so every result is the single-threaded one (they shared the plan's
    # scratch arrays and interleaved their transposes: wrong numbers, hangs at 3-4 ranks).
    plan = FFT(handle if checking else unchecked, THREADS_GDIMS, pdims, kind=kind, backend=backend)
    a, spec = pair(plan)
    back = plan.backward(spec)
    errors: list[BaseException] = []

    def calls(f: Callable[[Any], Any], x: Any, want: Any) -> None:
        try:
            for _ in range(20):
                assert rel(f(x), want) < 1e-13
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    # One transform per round: forward from both threads, then backward from both.
    for f, x, want in ((plan.forward, a, spec), (plan.backward, spec, back)):
        run_threads([lambda f=f, x=x, want=want: calls(f, x, want)] * 2)
        assert not errors, errors
    still_works(plan)
    plan.destroy()


@threads_ok
@cpu_threads
@several
@pytest.mark.checking
@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_mixed_calls_from_two_threads_raise_instead_of_garbage(handle: cudecomp.Handle, backend: TransposeCommBackend) -> None:
    # Each thread alternates forward and backward: which call of one rank meets which of
    # another is decided by timing. In checking mode a forward meeting a backward raises on
    # every rank it involves; every call that runs returns the right numbers.
    plan = FFT(handle, THREADS_GDIMS, PDIMS[-1], kind="r2c", backend=backend)
    a, spec = pair(plan)
    back = plan.backward(spec)
    errors: list[BaseException] = []

    def calls() -> None:
        try:
            for _ in range(6):
                for f, x, want in ((plan.forward, a, spec), (plan.backward, spec, back)):
                    try:
                        r = f(x)
                    except Invalid as e:
                        assert re.search(r"differ across ranks: .* call is (forward|backward) on rank 0 and (forward|backward)", str(e)), e
                        continue
                    assert rel(r, want) < 1e-13
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    run_threads([calls, calls])
    assert not errors, errors
    still_works(plan)
    plan.destroy()


@threads_ok
@pytest.mark.skipif(not cudecomp.CPU_ONLY, reason="a GPU handle runs one operation at a time (threading.md)")
@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_distinct_plans_from_two_threads(backend: TransposeCommBackend) -> None:
    # Each plan runs on its own communicators: two threads mixing forward and backward of
    # two plans, started in opposite orders on alternate ranks, neither wait for each other
    # nor meet the other plan's calls. (The default mode: the checking mode settles a
    # handle's calls as one sequence, which such threads do not make.)
    with handle_with(CUDECOMP_CHECK_COLLECTIVES="0") as handle:
        distinct_plans_from_two_threads(handle, backend)


def distinct_plans_from_two_threads(handle: cudecomp.Handle, backend: TransposeCommBackend) -> None:
    plans = [FFT(handle, THREADS_GDIMS, PDIMS[-1], kind=k, backend=backend) for k in ("c2c", "r2c")]
    errors: list[BaseException] = []

    def calls(plan: FFT) -> None:
        try:
            a, spec = pair(plan)
            for _ in range(10):
                assert rel(plan.forward(a), spec) < 1e-13
                assert rel(plan.backward(spec), a) < 1e-12
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    order = plans if RANK % 2 == 0 else plans[::-1]
    run_threads([lambda p=p: calls(p) for p in order])
    assert not errors, errors
    for p in plans:
        p.destroy()


@pytest.mark.skipif(not gpu_available(), reason="needs the GPU variant and a GPU")
def test_one_streamed_plan_from_two_streams(handle: cudecomp.Handle) -> None:  # pragma: no cover - GPU
    # A plan's buffers are its own: calls on different streams take turns on the device too.
    import cupy

    plan = FFT(handle, (32, 16, 16), (1, NRANKS), backend=TransposeCommBackend.DIRECT, transposed_out=True)
    a, spec = pair(plan)
    cupy.cuda.get_current_stream().synchronize()
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    results = []
    for _ in range(4):
        for s in streams:
            results.append(plan.forward(a, stream=s))
    for s in streams:
        s.synchronize()
    for r in results:
        assert rel(r, spec) < 1e-13
    plan.destroy()


# ------------------------------------------------------------------ one rank's argument error (item 2)


def bad_calls() -> list[tuple[str, Callable[[FFT, Any, Any], Any], type[Exception]]]:
    """(name, call on the failing rank given the plan, its input and spectrum, its exception)."""
    cases: list[tuple[str, Callable[[FFT, Any, Any], Any], type[Exception]]] = [
        ("forward wrong shape", lambda p, a, s: p.forward(xp.zeros((1, 2, 3), p.input_dtype)), Invalid),
        ("forward wrong dtype", lambda p, a, s: p.forward(a.astype(np.complex64)), TypeError),
        ("forward a list", lambda p, a, s: p.forward(to_host(a).tolist()), TypeError),
        ("forward not contiguous", lambda p, a, s: p.forward(xp.zeros(a.shape[::-1], a.dtype).T), Invalid),
        ("forward out wrong shape", lambda p, a, s: p.forward(a, out=xp.zeros((1, 1, 1), p.output_dtype)), Invalid),
        ("backward wrong dtype", lambda p, a, s: p.backward(s.real.copy()), TypeError),
        ("backward wrong shape", lambda p, a, s: p.backward(s.reshape(-1)), Invalid),
        ("backward out wrong dtype", lambda p, a, s: p.backward(s, out=p.zeros_input().astype(np.float32)), TypeError),
    ]
    if cudecomp.CPU_ONLY:

        def read_only(p: FFT, a: Any, s: Any) -> Any:
            o = p.zeros_output()
            o.flags.writeable = False
            return p.forward(a, out=o)

        cases.append(("forward out read-only", read_only, Invalid))
    else:
        cases.append(("forward stream of unknown kind", lambda p, a, s: p.forward(a, stream="junk"), TypeError))
    return cases


BAD = bad_calls()


@pytest.mark.checking
@several
@pytest.mark.parametrize("name, call, error", BAD, ids=[c[0] for c in BAD])
def test_argument_error_on_one_rank(
    handle: cudecomp.Handle, name: str, call: Callable[[FFT, Any, Any], Any], error: type[Exception]
) -> None:
    # The failing rank raises its own error; the others, already in the call's agreement,
    # raise InvalidUsageError naming it instead of waiting inside the transform.
    with FFT(handle, GDIMS, PDIMS[-1], kind="r2c") as plan:
        a, spec = pair(plan)
        transform = plan.backward if name.startswith("backward") else plan.forward
        x = spec if transform == plan.backward else a
        if RANK == LAST:
            with pytest.raises(error) as e:
                call(plan, a, spec)
            assert e.type is error
        else:
            with pytest.raises(Invalid, match=f"{FAILED}: {error.__name__}"):
                transform(x)
        still_works(plan)
    handle_works(handle)


@pytest.mark.parametrize("name, call, error", BAD, ids=[c[0] for c in BAD])
def test_argument_error_on_every_rank(
    handle: cudecomp.Handle, name: str, call: Callable[[FFT, Any, Any], Any], error: type[Exception]
) -> None:
    # Every rank fails alike: each raises its own error (the agreement tells them all).
    with FFT(handle, GDIMS, PDIMS[-1], kind="r2c") as plan:
        a, spec = pair(plan)
        with pytest.raises(error) as e:
            call(plan, a, spec)
        assert e.type is error
        still_works(plan)


@several
def test_unchecked_argument_error_exchanges_nothing(unchecked: cudecomp.Handle) -> None:
    # Without the checking mode a failing rank raises at once and exchanges nothing: were
    # it to join an agreement, it would wait there while the others run the next forward.
    with FFT(unchecked, GDIMS, PDIMS[-1], kind="r2c") as plan:
        a, spec = pair(plan)
        if RANK == 0:
            with pytest.raises(Invalid, match="shape"):
                plan.forward(xp.zeros((1, 2, 3)))
            with pytest.raises(TypeError, match="dtype"):
                plan.backward(spec.real.copy())
        still_works(plan)


# ------------------------------------------------------------------ calls that differ between ranks (items 2, 4)


DIFFERENT = [("forward", "backward"), ("backward", "forward"), ("forward", "destroy"), ("destroy", "backward")]


@pytest.mark.checking
@several
@pytest.mark.parametrize("transposed", [False, True], ids=["natural", "transposed"])
@pytest.mark.parametrize("mine, theirs", DIFFERENT, ids=[f"{a}-vs-{b}" for a, b in DIFFERENT])
def test_different_calls_raise_everywhere(handle: cudecomp.Handle, transposed: bool, mine: str, theirs: str) -> None:
    # Rank 0..LAST-1 call `mine`, the last rank `theirs`. forward and backward run the same
    # transposes (their own agreement would pass, and both returned garbage); destroy on one
    # rank would leave the others waiting in the transform. Every rank raises, nothing is
    # destroyed, and the plan keeps working.
    plan = FFT(handle, GDIMS, PDIMS[-1], kind="r2c", transposed_out=transposed)
    a, spec = pair(plan)
    call = theirs if RANK == LAST else mine
    run = {"forward": lambda: plan.forward(a), "backward": lambda: plan.backward(spec), "destroy": plan.destroy}[call]
    with pytest.raises(Invalid, match=re.escape(f"call is {mine} on rank 0 and {theirs} on rank {LAST}")):
        run()
    still_works(plan)
    plan.destroy()


@pytest.mark.checking
@several
def test_one_rank_destroying_then_calling(handle: cudecomp.Handle) -> None:
    # The report's sequence: the last rank destroys the plan and calls forward, the others
    # call forward twice. Its destroy meets their first forward (both raise); the plan is
    # still alive there, so the second forward runs everywhere.
    plan = FFT(handle, GDIMS, PDIMS[-1])
    a, spec = pair(plan)
    if RANK == LAST:
        with pytest.raises(Invalid, match="call is forward on rank 0 and destroy"):
            plan.destroy()
    else:
        with pytest.raises(Invalid, match=f"call is forward on rank 0 and destroy on rank {LAST}"):
            plan.forward(a)
    assert rel(plan.forward(a), spec) < 1e-13
    plan.destroy()


def test_destroyed_plan_raises_alone(handle: cudecomp.Handle) -> None:
    # Destroyed on every rank (agreed), a call of the plan on one rank raises there at
    # once: no other rank waits in a call of it.
    plan = FFT(handle, GDIMS, PDIMS[-1], kind="r2c")
    a, spec = pair(plan)
    plan.destroy()
    if RANK == LAST:
        for call in (lambda: plan.forward(a), lambda: plan.backward(spec), plan.destroy):
            with pytest.raises(Invalid, match="destroyed") as e:
                call()
            assert e.type is Invalid
    with pytest.raises(Invalid, match="destroyed"):
        plan.destroy()
    plan.__exit__(None, None, None)  # leaving a with block: nothing left to do
    handle_works(handle)


# ------------------------------------------------------------------ plan arguments: canonical values, named differences (items 5, 6)


DTYPES = [None, np.complex128, "complex128", cudecomp.DataType.DOUBLE_COMPLEX]
SAME: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("pdims None / (0, 0)", {"pdims": None}, {"pdims": (0, 0)}),
    ("kind numpy.str_ / str", {"kind": np.str_("c2c")}, {"kind": "c2c"}),
    ("norm numpy.str_ / str", {"norm": np.str_("ortho")}, {"norm": "ortho"}),
    ("config None / GridDescConfig()", {"config": None}, {"config": cudecomp.GridDescConfig()}),
    ("backend None / MPI_P2P", {"backend": None}, {"backend": TransposeCommBackend.MPI_P2P}),
    ("backend [MPI_P2P] / MPI_P2P", {"backend": [TransposeCommBackend.MPI_P2P]}, {"backend": TransposeCommBackend.MPI_P2P}),
    ("dtype forms", {"dtype": DTYPES[RANK % len(DTYPES)]}, {"dtype": DTYPES[-1]}),
    ("transposed_out numpy.bool_ / bool", {"transposed_out": np.False_}, {"transposed_out": False}),
    ("gdims array / tuple", {"gdims": np.array(GDIMS)}, {"gdims": GDIMS}),
    ("autotune_reps without a search", {"autotune_reps": 1}, {"autotune_reps": 5}),
    ("backend config / argument", {"config": cudecomp.GridDescConfig()}, {"backend": TransposeCommBackend.MPI_P2P}),
]


def plan_args(kw: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    kw = dict(kw)
    return kw.pop("gdims", GDIMS), kw.pop("pdims", PDIMS[-1]), kw


@several
@pytest.mark.parametrize("name, first, last", SAME, ids=[c[0] for c in SAME])
def test_same_meaning_agrees(handle: cudecomp.Handle, name: str, first: dict[str, Any], last: dict[str, Any]) -> None:
    gdims, pdims, kw = plan_args(last if RANK == LAST else first)
    with FFT(handle, gdims, pdims, **kw) as plan:
        still_works(plan)


@several
@pytest.mark.parametrize(
    "var, first, last",
    [("CUDECOMP_FFT_BACKWARD", None, "rows"), ("CUDECOMP_FFT_CHUNKS", None, "8"), ("CUDECOMP_FFT_STREAM", None, "auto")],
    ids=["backward", "chunks", "stream"],
)
def test_same_settings_agree(var: str, first: str | None, last: str) -> None:
    # Unset and the value the plan reads when unset mean the same; the ranks agree on
    # them when the handle is made.
    with handle_with(**{var: last if RANK == LAST else first}) as handle, FFT(handle, GDIMS, PDIMS[-1]) as plan:
        still_works(plan)


def differing() -> list[tuple[str, dict[str, Any], dict[str, Any], str]]:
    """(id, rank 0's arguments, the last rank's, the values the message names)."""
    p0, p1 = PDIMS[0], PDIMS[-1]
    col = cudecomp.GridDescConfig()
    col.rank_order = cudecomp.RankOrder.COL_MAJOR
    halo = cudecomp.GridDescConfig()
    halo.halo_comm_backend = cudecomp.HaloCommBackend.MPI_BLOCKING
    a2a = cudecomp.GridDescConfig()
    a2a.transpose_comm_backend = TransposeCommBackend.MPI_A2A
    return [
        ("kind", {}, {"kind": "r2c"}, "kind is c2c on rank 0 and r2c"),
        ("norm", {}, {"norm": "ortho"}, "norm is backward on rank 0 and ortho"),
        ("transposed_out", {}, {"transposed_out": True}, "transposed_out is False on rank 0 and True"),
        ("gdims", {}, {"gdims": (12, 6, 7)}, "gdims is (12, 6, 6) on rank 0 and (12, 6, 7)"),
        ("pdims", {"pdims": p0}, {"pdims": p1}, f"pdims is {p0} on rank 0 and {p1}"),
        ("pdims auto", {"pdims": None}, {"pdims": p1}, f"pdims is None (autotuned) on rank 0 and {p1}"),
        ("dtype", {}, {"dtype": np.complex64}, "dtype is complex128 on rank 0 and complex64"),
        ("backend", {}, {"backend": TransposeCommBackend.MPI_A2A}, "backend is MPI_P2P on rank 0 and MPI_A2A"),
        ("backend via config", {}, {"config": a2a}, "backend is MPI_P2P on rank 0 and MPI_A2A"),
        (
            "backend list",
            {"backend": [TransposeCommBackend.MPI_P2P, TransposeCommBackend.MPI_A2A]},
            {},
            "backend is [MPI_P2P, MPI_A2A] on rank 0 and MPI_P2P",
        ),
        ("config.rank_order", {}, {"config": col}, "config.rank_order is DEFAULT on rank 0 and COL_MAJOR"),
        ("config.halo_comm_backend", {}, {"config": halo}, "config.halo_comm_backend is MPI on rank 0 and MPI_BLOCKING"),
        ("autotune_reps", {"pdims": None}, {"pdims": None, "autotune_reps": 2}, "autotune_reps is 3 on rank 0 and 2"),
    ]


DIFFERING = differing()


@several
@pytest.mark.parametrize("name, first, last, message", DIFFERING, ids=[c[0] for c in DIFFERING])
def test_differing_arguments_are_named(
    handle: cudecomp.Handle, name: str, first: dict[str, Any], last: dict[str, Any], message: str
) -> None:
    gdims, pdims, kw = plan_args(last if RANK == LAST else first)
    with pytest.raises(
        Invalid,
        match=re.escape(
            f"cudecomp.fft.FFT arguments differ across ranks: expected the same values on every rank, but {message} on rank {LAST}"
        ),
    ) as e:
        FFT(handle, gdims, pdims, **kw)
    assert e.type is Invalid
    handle_works(handle)


@several
def test_differing_settings_are_named(handle: cudecomp.Handle) -> None:
    # Refused where the handle is made, on every rank, naming the variable and both values.
    with pytest.raises(Invalid, match=f"CUDECOMP_FFT_CHUNKS is 3 on rank 0 and 4 on rank {LAST}"):
        with handle_with(CUDECOMP_FFT_CHUNKS="4" if RANK == LAST else "3"):
            pass
    handle_works(handle)


@pytest.mark.parametrize("value", ["False", "True", 0, 1, None, [False]], ids=repr)
def test_transposed_out_takes_only_bools(handle: cudecomp.Handle, value: Any) -> None:
    # As the configurations' boolean fields: "False" was taken as True.
    with pytest.raises(TypeError, match="transposed_out: expected a bool"):
        FFT(handle, GDIMS, PDIMS[-1], transposed_out=value)
    with FFT(handle, GDIMS, PDIMS[-1], transposed_out=np.True_) as plan:
        assert plan.transposed_out is True
        still_works(plan)


@several
def test_transposed_out_string_on_one_rank(handle: cudecomp.Handle) -> None:
    if RANK == LAST:
        with pytest.raises(TypeError, match="transposed_out"):
            FFT(handle, GDIMS, PDIMS[-1], transposed_out="False")
    else:
        with pytest.raises(Invalid, match=f"rank {LAST} failed in .*TypeError: transposed_out"):
            FFT(handle, GDIMS, PDIMS[-1], transposed_out=False)
    handle_works(handle)


@pytest.mark.parametrize("kw", [{"kind": 1}, {"kind": b"c2c"}, {"norm": None}, {"norm": ["ortho"]}], ids=repr)
def test_kind_and_norm_take_strings(handle: cudecomp.Handle, kw: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match=next(iter(kw))):
        FFT(handle, GDIMS, PDIMS[-1], **kw)
    handle_works(handle)


# ------------------------------------------------------------------ after the handle's finalize (item 7)


@pytest.mark.parametrize("kind", ["c2c", "r2c"])
def test_destroy_and_exit_after_finalize(comm: MPI.Comm, kind: str) -> None:
    # The grids cannot be destroyed once their handle is finalized: destroy() and leaving
    # the with block mark the plan destroyed instead of raising (as GridDesc.__exit__).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # the grids' own, collected after finalize
        h = cudecomp.Handle(comm)
        plan = FFT(h, GDIMS, PDIMS[-1], kind=kind)
        h.finalize()
        plan.destroy()
        assert "destroyed" in repr(plan)
        with pytest.raises(Invalid, match="destroyed"):
            plan.destroy()
        with pytest.raises(Invalid, match="destroyed"):
            plan.forward(plan_input_like(kind))
        h = cudecomp.Handle(comm)
        with FFT(h, GDIMS, PDIMS[-1], kind=kind) as plan:
            h.finalize()
        assert "destroyed" in repr(plan)
        del plan
        gc.collect()


def plan_input_like(kind: str) -> Any:
    return xp.zeros((1, 1, 1), np.float64 if kind == "r2c" else np.complex128)


@pytest.mark.skipif(not cudecomp.CPU_ONLY or NRANKS > 1, reason="CPU variant, one rank (forks a child)")
def test_forked_child_shares_library_arrays() -> None:
    # What fft.md and cpu.md say: a DIRECT plan's library arrays (node-shared memory from
    # CUDECOMP_SHARED_ARRAY_MIN_BYTES on, a setting read when the handle is made) are
    # shared with a child made by fork, NumPy arrays are copied.
    import os

    direct = TransposeCommBackend.DIRECT
    with handle_with(CUDECOMP_SHARED_ARRAY_MIN_BYTES="1") as handle, FFT(handle, GDIMS, (1, 1), backend=direct) as plan:
        shared, private = plan.zeros_input(), np.zeros(plan.input_info.array_shape, plan.input_dtype)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            shared[0, 0, 0] = private[0, 0, 0] = 1
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert status == 0
        assert shared[0, 0, 0] == 1 and private[0, 0, 0] == 0
