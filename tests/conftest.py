"""Shared fixtures and the test matrix.

Which tests run where (markers registered in pyproject.toml):

- unmarked tests do not depend on the rank count: they run in the serial pass alone
  (``pytest tests``) and are deselected under ``mpiexec -n N`` with N > 1;
- ``@pytest.mark.mpi`` marks rank-sensitive tests (exchanges, halos, agreement,
  autotuning, FFT schedules): they run serially and under every rank count;
  ``mpi(min_ranks=k)`` skips them below ``k`` ranks, ``mpi(ranks=(…))`` runs them at those
  counts only;
- ``@pytest.mark.gpu`` tests skip without the GPU variant and a GPU;
- ``@pytest.mark.checking`` marks cases that test the per-operation agreement itself
  (ranks that disagree on purpose): they run only where ``CUDECOMP_CHECK_COLLECTIVES`` is
  on, then in every share (see ``_checking_verdict``);
- ``@pytest.mark.slow`` marks the slowest few (``-m "not slow"`` for a quick pass).

``CUDECOMP_TEST_SHARE=K/N`` (``scripts/test.sh`` gives MPICH ``0/2`` and Open MPI ``1/2``)
keeps the K-th of N shares of the rank-sensitive cases: which share a case
falls in turns with the rank count, so that every case runs at every rank count under one
family and under every family at some rank count (a case of fewer rank counts than
shares, say one for 4 ranks only, runs in every share). Unset, every case runs.

Under mpiexec the run's summary names the unmarked tests it deselected. Every rank runs
the same tests; a failure on one rank aborts the whole job so that the others never wait
forever in a collective."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import tomllib
import zlib
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# Unless the environment says otherwise, the suites run with the per-operation agreement
# on: a test whose ranks disagree fails on every rank instead of hanging (the misuse suite
# sets the mode itself where it matters). scripts/test.sh turns it off for one MPI family,
# so that every rank-sensitive case also runs the default path users get.
os.environ.setdefault("CUDECOMP_CHECK_COLLECTIVES", "1")

from mpi4py import MPI  # noqa: E402

import cudecomp  # noqa: E402


def _select_gpu() -> None:
    """GPU variant: one device per local rank (round robin), before any handle exists."""
    if cudecomp.CPU_ONLY:
        return
    try:
        import cupy
    except ImportError:
        return
    n = cupy.cuda.runtime.getDeviceCount()
    if n:
        local = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
        cupy.cuda.Device(local.rank % n).use()
        local.Free()


_select_gpu()


def gpu_available() -> bool:
    """True when the GPU variant is loaded and CuPy sees a GPU."""
    if cudecomp.CPU_ONLY:
        return False
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_configure(config: pytest.Config) -> None:
    # Ranks of one job must not share (and concurrently clean) pytest's temporary root.
    if MPI.COMM_WORLD.size > 1 and not config.option.basetemp:
        job = MPI.COMM_WORLD.bcast(os.getpid())
        config.option.basetemp = os.path.join(tempfile.gettempdir(), f"cudecomp-pytest-{job}-rank{MPI.COMM_WORLD.rank}")


def _rank_counts() -> tuple[int, ...]:
    """The test matrix's rank counts, from ``[tool.cudecomp.tests]`` in pyproject.toml (scripts/test.sh reads the same)."""
    with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml"), "rb") as f:
        return tuple(tomllib.load(f)["tool"]["cudecomp"]["tests"]["rank-counts"])


# A case's share turns with its count's place here.
RANK_COUNTS = _rank_counts()


def _share() -> tuple[int, int] | None:
    """``CUDECOMP_TEST_SHARE`` as (K, N), or None when unset."""
    raw = os.environ.get("CUDECOMP_TEST_SHARE", "").strip()
    if not raw:
        return None
    try:
        k, n = (int(v) for v in raw.split("/"))
    except ValueError:
        raise pytest.UsageError(f"CUDECOMP_TEST_SHARE must be K/N with 0 <= K < N, got {raw!r}") from None
    if not 0 <= k < n:
        raise pytest.UsageError(f"CUDECOMP_TEST_SHARE must be K/N with 0 <= K < N, got {raw!r}")
    return k, n


def _runs_at(mark: pytest.Mark, nranks: int) -> bool:
    """Whether a case marked ``mark`` (``mpi``, with its ``min_ranks`` and ``ranks``) runs on ``nranks`` ranks."""
    ranks = mark.kwargs.get("ranks")
    return nranks >= mark.kwargs.get("min_ranks", 1) and (ranks is None or nranks in ranks)


def _counts(mark: pytest.Mark) -> list[int]:
    """The rank counts of ``RANK_COUNTS`` where a case marked ``mark`` (``mpi``) runs."""
    return [c for c in RANK_COUNTS if _runs_at(mark, c)]


def _in_share(item: pytest.Item, nranks: int, share: tuple[int, int] | None) -> bool:
    """Whether a rank-sensitive case is in this job's share (every other test is).

    The share turns with the place of ``nranks`` among the case's own rank counts, so a
    case with at least as many counts as shares runs in every share; one with fewer (say
    a case for 4 ranks only) runs in every share at each of its counts.
    """
    mark = item.get_closest_marker("mpi")
    if share is None or mark is None:
        return True
    k, n = share
    counts = _counts(mark)
    if nranks in counts and len(counts) < n:
        return True
    place = counts.index(nranks) if nranks in counts else nranks
    return (zlib.crc32(item.nodeid.encode()) + place) % n == k


def _checking() -> bool:
    """Whether this run's handles check every operation across ranks (``CUDECOMP_CHECK_COLLECTIVES``: ``0`` or ``1``)."""
    return os.environ["CUDECOMP_CHECK_COLLECTIVES"] == "1"


def _checking_verdict(item: pytest.Item, share: tuple[int, int] | None) -> bool | str | None:
    """For a case marked ``checking`` (it tests the per-operation agreement itself): True to
    keep it whatever its share, False to deselect it, or why it is skipped; None for other cases.

    With the agreement on such a case runs at each of its rank counts, in every share; with
    it off it is deselected where shares split the run (the family with the agreement on
    runs it) and skipped in a plain run.
    """
    if item.get_closest_marker("checking") is None:
        return None
    if _checking():
        return True
    return False if share is not None else "tests the checking mode: runs with CUDECOMP_CHECK_COLLECTIVES=1"


def _runs_here(item: pytest.Item, nranks: int) -> bool | str:
    """True where ``item`` runs on ``nranks`` ranks, False where it is deselected, or the
    reason it is skipped (rank-sensitive tests seen in the serial pass, to be run under MPI)."""
    mark = item.get_closest_marker("mpi")
    if mark is None:
        return nranks == 1
    if _runs_at(mark, nranks):
        return True
    if nranks == 1:
        lo, ranks = mark.kwargs.get("min_ranks", 1), mark.kwargs.get("ranks")
        counts = ", ".join(map(str, ranks)) if ranks is not None else f"{lo} or more"
        return f"rank-sensitive: runs under mpiexec on {counts} ranks"
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    nranks = MPI.COMM_WORLD.size
    share = _share()
    gpu = None
    kept, dropped, serial_only = [], [], []
    for item in items:
        verdict = _runs_here(item, nranks)
        checking = _checking_verdict(item, share) if verdict is not False else None
        if verdict is False or checking is False or (checking is None and not _in_share(item, nranks, share)):
            dropped.append(item)
            if item.get_closest_marker("mpi") is None:
                serial_only.append(item.nodeid)
            continue
        if isinstance(verdict, str) or isinstance(checking, str):
            item.add_marker(pytest.mark.skip(reason=verdict if isinstance(verdict, str) else checking))
        if item.get_closest_marker("gpu") is not None:
            gpu = gpu_available() if gpu is None else gpu
            if not gpu:
                item.add_marker(pytest.mark.skip(reason="needs the GPU variant and a GPU"))
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    # Tests on jax.distributed come first: its runtime must start before JAX's backends,
    # which any other test of JAX starts.
    items[:] = sorted(kept, key=lambda item: "distributed" not in getattr(item, "fixturenames", ()))
    config.stash[_SERIAL_ONLY] = serial_only


_SERIAL_ONLY = pytest.StashKey[list[str]]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    """Say which tests ``mpiexec -n N`` (N > 1) left out for not being rank-sensitive, so none is dropped silently."""
    names = config.stash.get(_SERIAL_ONLY, [])
    if names and MPI.COMM_WORLD.rank == 0:
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        terminalreporter.write_line(
            f"cudecomp: {len(names)} unmarked tests deselected on {MPI.COMM_WORLD.size} ranks ({shown}): "
            "they run in the serial pass only; mark a test @pytest.mark.mpi to run it under mpiexec",
            yellow=True,
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and MPI.COMM_WORLD.size > 1:
        sys.stderr.write(f"\n[rank {MPI.COMM_WORLD.rank}] {item.nodeid} failed:\n{report.longreprtext}\n")
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)


@pytest.fixture
def comm() -> MPI.Comm:
    return MPI.COMM_WORLD


@pytest.fixture(scope="module")
def handle() -> Iterator[cudecomp.Handle]:
    """One handle per test module (creating handles, NCCL above all, is collective and slow)."""
    comm = MPI.COMM_WORLD
    if not cudecomp.CPU_ONLY and not gpu_available():
        pytest.skip("GPU variant without a usable GPU")
    h = cudecomp.Handle(comm)
    yield h
    try:
        h.finalize()
    except cudecomp.InvalidUsageError:
        pass  # the test finalized it itself


@contextlib.contextmanager
def handle_with(**env: str | None) -> Iterator[cudecomp.Handle]:
    """A handle made with these ``CUDECOMP_*`` settings (``None`` unsets one), which a
    handle reads when it is created; the environment is restored at once."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            if v is None:
                mp.delenv(k, raising=False)
            else:
                mp.setenv(k, v)
        h = cudecomp.Handle(MPI.COMM_WORLD)
    with h:
        yield h


def requires_cpu_variant() -> pytest.MarkDecorator:
    return pytest.mark.skipif(not cudecomp.CPU_ONLY, reason="needs the CPU variant (NumPy arrays)")


def requires_data_path() -> pytest.MarkDecorator:
    """The oracle suites run on the CPU variant, or on the GPU variant with a GPU."""
    return pytest.mark.skipif(
        not cudecomp.CPU_ONLY and not gpu_available(), reason="GPU variant without a usable GPU (needs CuPy and a CUDA device)"
    )
