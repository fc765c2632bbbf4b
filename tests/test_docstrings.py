"""The stub's docstrings are the extension's, generated from the Rust doc comments.

``python/cudecomp/_cudecomp.pyi`` is what the documentation site shows; its docstrings are
written by ``scripts/stubs.py`` from the run-time docstrings, which PyO3 makes from the
Rust doc comments in ``crates/cudecomp-py/src``. These tests check that regenerating
changes nothing, and that every class, public method and property of the extension, every
dunder the stub documents and every documented module function is in the stub with the
extension's docstring. Run as a script, it prints the mismatches.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import os
import sys
from typing import Any

import pytest

import cudecomp
from cudecomp import _cudecomp

STUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "cudecomp", "_cudecomp.pyi")


def stub_docs() -> tuple[dict[str, str | None], dict[str, tuple[str | None, dict[str, str | None]]]]:
    """Module functions and classes of the stub: name -> docstring (None when it has none)."""
    with open(STUB) as f:
        tree = ast.parse(f.read(), STUB)
    functions: dict[str, str | None] = {}
    classes: dict[str, tuple[str | None, dict[str, str | None]]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            functions[node.name] = ast.get_docstring(node)
        elif isinstance(node, ast.ClassDef):
            members = {m.name: ast.get_docstring(m) for m in node.body if isinstance(m, ast.FunctionDef)}
            classes[node.name] = (ast.get_docstring(node), members)
    return functions, classes


FUNCTIONS, CLASSES = stub_docs()


def diff(what: str, runtime: str | None, stub: str | None) -> str | None:
    """A readable report when the run-time docstring differs from the stub's, else None."""
    if runtime == stub:
        return None
    lines = difflib.unified_diff(
        (stub or "<no docstring>").splitlines(), (runtime or "<no docstring>").splitlines(), "stub", "runtime", lineterm=""
    )
    return f"{what}:\n" + "\n".join(lines)


def class_mismatches(name: str) -> list[str]:
    """Mismatches of one class: its docstring, its public members and the stub's documented ones."""
    cls = getattr(_cudecomp, name, None)
    if cls is None:
        return [f"{name}: in the stub, not in the extension"]
    doc, members = CLASSES[name]
    found = [diff(name, inspect.getdoc(cls), doc)]
    public = {m for m in vars(cls) if not m.startswith("_")}
    documented = {m for m, d in members.items() if d is not None}
    for m in sorted(public | documented):
        if m not in members:
            found.append(f"{name}.{m}: public in the extension, absent from the stub")
        elif m not in vars(cls):
            found.append(f"{name}.{m}: documented in the stub, absent from the extension")
        else:
            found.append(diff(f"{name}.{m}", inspect.getdoc(getattr(vars(cls)[m], "__func__", vars(cls)[m])), members[m]))
    return [f for f in found if f]


def function_mismatches() -> list[str]:
    """Mismatches of the stub's documented module functions."""
    found = []
    for name, doc in FUNCTIONS.items():
        if doc is None:
            continue
        f = getattr(_cudecomp, name, None)
        found.append(f"{name}: in the stub, not in the extension" if f is None else diff(name, inspect.getdoc(f), doc))
    return [f for f in found if f]


def _stubs_and_text() -> tuple[Any, str]:
    """``scripts/stubs.py`` as a module, and the stub's text."""
    sys.path.insert(0, os.path.join(os.path.dirname(STUB), "..", "..", "scripts"))
    try:
        import stubs
    finally:
        sys.path.pop(0)
    with open(STUB) as f:
        return stubs, f.read()


def test_regenerating_the_stub_changes_nothing() -> None:
    stubs, text = _stubs_and_text()
    assert stubs.regenerate(text, _cudecomp) == text, "run python scripts/stubs.py"


def test_stub_lists_the_classes() -> None:
    assert set(CLASSES) == {"PencilInfo", "Handle", "GridDesc", "DeviceBuffer", "Redistribution", "PencilLayout", "BoxLayout"}


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_class_docstrings_match_stub(name: str) -> None:
    if name == "DeviceBuffer" and cudecomp.CPU_ONLY:
        pytest.skip("DeviceBuffer exists in the GPU variant only")
    found = class_mismatches(name)
    assert not found, "\n\n".join(found)


def test_function_docstrings_match_stub() -> None:
    found = function_mismatches()
    assert not found, "\n\n".join(found)


if __name__ == "__main__":
    report = function_mismatches()
    for name in sorted(CLASSES):
        if name == "DeviceBuffer" and cudecomp.CPU_ONLY:
            print("DeviceBuffer: skipped (CPU variant)")
            continue
        report += class_mismatches(name)
    print("\n\n".join(report) if report else "no mismatches")
    sys.exit(1 if report else 0)


def test_stub_signatures_match_the_extension() -> None:
    """The stub's parameter names, order, keyword-only split and defaults are the run-time ones (PyO3's ``signature``)."""
    stubs, text = _stubs_and_text()
    assert stubs.signature_problems(text, _cudecomp) == []
