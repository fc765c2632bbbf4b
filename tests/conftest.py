"""Shared fixtures. Under mpiexec every rank runs every test; a failure on one rank
aborts the whole job so that the others never wait forever in a collective."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from mpi4py import MPI  # noqa: E402

import cudecomp  # noqa: E402


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


@pytest.fixture
def handle(comm: MPI.Comm) -> Iterator[cudecomp.Handle]:
    h = cudecomp.Handle(comm)
    yield h
    try:
        h.finalize()
    except cudecomp.InvalidUsageError:
        pass  # the test finalized it itself


def requires_cpu_variant() -> pytest.MarkDecorator:
    return pytest.mark.skipif(not cudecomp.CPU_ONLY, reason="needs the CPU variant (NumPy arrays)")
