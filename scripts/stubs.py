"""Write the docstrings of ``python/cudecomp/_cudecomp.pyi`` from the extension's own.

The Rust doc comments of ``crates/cudecomp-py/src`` are the one source of the extension's
documentation: PyO3 makes them the run-time docstrings, and this script copies those into
the stub, which the documentation site and type checkers read. The stub's signatures are
written by hand (the doc comments carry no types); its docstrings are generated.

    python scripts/stubs.py          # rewrite the stub's docstrings
    python scripts/stubs.py --check  # exit 1, naming the differences, unless up to date

Run it with the package installed (either variant: classes the loaded variant lacks, such as
the GPU variant's ``DeviceBuffer``, keep the stub's docstrings).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import inspect
import os
import sys
from typing import Any

STUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "cudecomp", "_cudecomp.pyi")


def literal(doc: str, indent: str) -> list[str]:
    """Return the lines of a triple-quoted docstring holding ``doc`` at ``indent``."""
    lines = doc.split("\n")
    if len(lines) == 1:
        return [f'{indent}"""{doc}"""']
    body = [f"{indent}{line}" if line else "" for line in lines[1:]]
    return [f'{indent}"""{lines[0]}', *body, f'{indent}"""']


def runtime_doc(ext: Any, path: list[str]) -> str | None:
    """Return the run-time docstring of ``ext.<path>`` (cleaned); None where the loaded variant has no such name."""
    obj: Any = ext
    for i, name in enumerate(path):
        if i and isinstance(obj, type):
            if name not in vars(obj):
                return None
            obj = vars(obj)[name]
            # A static method's own docstring, not the staticmethod type's.
            obj = getattr(obj, "__func__", obj)
        elif hasattr(obj, name):
            obj = getattr(obj, name)
        else:
            return None
    return inspect.getdoc(obj)


def regenerate(text: str, ext: Any) -> str:
    """``text`` (the stub) with every docstring replaced by the extension's."""
    tree = ast.parse(text)
    lines = text.split("\n")
    edits: list[tuple[int, int, list[str]]] = []

    def visit(body: list[ast.stmt], path: list[str]) -> None:
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                continue
            where = [*path, node.name]
            first = node.body[0] if node.body else None
            has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
            doc = runtime_doc(ext, where)
            if has_doc and doc is not None and first is not None and first.end_lineno is not None:
                indent = lines[first.lineno - 1][: first.col_offset]
                edits.append((first.lineno - 1, first.end_lineno, literal(doc, indent)))
            if isinstance(node, ast.ClassDef):
                visit(node.body, where)

    visit(tree.body, [])
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = new
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or, with ``--check``, compare) the stub's docstrings; 1 when they differ under ``--check``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only report whether the stub is up to date")
    args = p.parse_args(argv)
    from cudecomp import _cudecomp

    with open(STUB) as f:
        old = f.read()
    new = regenerate(old, _cudecomp)
    if new == old:
        return 0
    if args.check:
        diff = difflib.unified_diff(old.splitlines(), new.splitlines(), "stub", "from the Rust doc comments", lineterm="")
        print("\n".join(diff))
        print("\nThe stub's docstrings differ from the extension's: run python scripts/stubs.py", file=sys.stderr)
        return 1
    with open(STUB, "w") as f:
        f.write(new)
    print(f"rewrote {os.path.relpath(STUB)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
