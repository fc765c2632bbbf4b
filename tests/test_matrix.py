"""The test matrix's shares (``CUDECOMP_TEST_SHARE``): every rank-sensitive case runs at
every rank count in exactly one share, and in every share at some count."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from conftest import RANK_COUNTS, _in_share, _share


def _item(nodeid: str, rank_sensitive: bool = True, parametrized: bool = True, **mpi: Any) -> SimpleNamespace:
    mark = pytest.mark.mpi(**mpi).mark
    item = SimpleNamespace(nodeid=nodeid, get_closest_marker=lambda name: mark if rank_sensitive and name == "mpi" else None)
    if parametrized:
        item.callspec = object()
    return item


@pytest.mark.parametrize("n", [2, 3])
def test_every_case_runs_once_per_rank_count_and_in_every_share(n: int) -> None:
    items = [_item(f"tests/test_x.py::test_case[{i}]") for i in range(200)]
    for item in items:
        shares_per_count = [[k for k in range(n) if _in_share(item, nranks, (k, n))] for nranks in RANK_COUNTS]  # type: ignore[arg-type]
        assert all(len(s) == 1 for s in shares_per_count), shares_per_count
        if n <= len(RANK_COUNTS):
            assert {s[0] for s in shares_per_count} == set(range(n))


@pytest.mark.parametrize("mpi", [{"ranks": (4,)}, {"ranks": (1, 3)}, {"ranks": (1, 2, 4)}, {"min_ranks": 4}, {"min_ranks": 2}])
def test_cases_of_some_rank_counts_run_in_every_share(mpi: dict[str, Any]) -> None:
    counts = [c for c in RANK_COUNTS if c >= mpi.get("min_ranks", 1) and c in mpi.get("ranks", RANK_COUNTS)]
    for i in range(100):
        item = _item(f"tests/test_x.py::test_case[{i}]", **mpi)
        shares = [{k for k in range(2) if _in_share(item, c, (k, 2))} for c in counts]  # type: ignore[arg-type]
        assert all(s for s in shares) and set().union(*shares) == {0, 1}, (counts, shares)
        if len(counts) >= 2:
            assert all(len(s) == 1 for s in shares)


def test_rank_independent_tests_run_in_every_share() -> None:
    for item in (
        _item("tests/test_x.py::test_one", rank_sensitive=False, parametrized=False),
        _item("tests/test_x.py::test_y[1]", rank_sensitive=False),
    ):
        assert all(_in_share(item, 4, (k, 2)) for k in range(2))  # type: ignore[arg-type]
    one = _item("tests/test_x.py::test_one", parametrized=False)
    assert sum(_in_share(one, 4, (k, 2)) for k in range(2)) == 1  # type: ignore[arg-type]
    assert _in_share(_item("tests/test_x.py::test_y[1]"), 4, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", ["2/2", "x", "1/0", "-1/2", "1/2/3"])
def test_a_bad_share_is_a_usage_error(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDECOMP_TEST_SHARE", raw)
    with pytest.raises(pytest.UsageError, match="K/N"):
        _share()


def test_no_share_runs_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDECOMP_TEST_SHARE", raising=False)
    assert _share() is None
    monkeypatch.setenv("CUDECOMP_TEST_SHARE", "1/2")
    assert _share() == (1, 2)
