"""Write the docstrings of ``python/cudecomp/_cudecomp.pyi`` from the extension's own.

The Rust doc comments of ``crates/cudecomp-py/src`` are the one source of the extension's
documentation: PyO3 makes them the run-time docstrings, and this script copies those into
the stub, which the documentation site and type checkers read. Its docstrings are
generated; its signatures carry the types, which the doc comments do not: each is written
once (the six transposes take the signature of ``transpose_x_to_y``, the three halo
updates that of ``update_halos_x``, copied by this script) and checked against the
run-time signature PyO3 makes from the same ``#[pyo3(signature)]`` that parses the
call: the names, their order, which are keyword-only, and the defaults must agree.

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
    obj = _runtime(ext, path)
    return None if obj is None else inspect.getdoc(obj)


#: Methods written once in the stub: each class's template, then the methods that share its signature.
SAME_SIGNATURE: dict[str, list[tuple[str, list[str]]]] = {
    "GridDesc": [
        ("transpose_x_to_y", ["transpose_y_to_z", "transpose_z_to_y", "transpose_y_to_x", "transpose_x_to_z", "transpose_z_to_x"]),
        ("update_halos_x", ["update_halos_y", "update_halos_z"]),
    ],
}


def _header(lines: list[str], node: ast.FunctionDef) -> tuple[int, int]:
    """Line range (0-based, end exclusive) of ``node``'s ``def`` up to its docstring or body."""
    return node.lineno - 1, node.body[0].lineno - 1


def shared_signatures(text: str) -> str:
    """``text`` with each follower of ``SAME_SIGNATURE`` given its template's signature."""
    tree = ast.parse(text)
    lines = text.split("\n")
    edits: list[tuple[int, int, list[str]]] = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in SAME_SIGNATURE):
        defs = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
        for template, followers in SAME_SIGNATURE[cls.name]:
            a, b = _header(lines, defs[template])
            head = lines[a:b]
            for name in followers:
                fa, fb = _header(lines, defs[name])
                edits.append((fa, fb, [line.replace(f"def {template}(", f"def {name}(") for line in head]))
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = new
    return "\n".join(lines)


def _runtime(ext: Any, path: list[str]) -> Any:
    """Return the extension's object at ``path``, or None where the loaded variant has none."""
    obj: Any = ext
    for i, name in enumerate(path):
        if i and isinstance(obj, type):
            if name not in vars(obj):
                return None
            obj = getattr(vars(obj)[name], "__func__", vars(obj)[name])
        elif hasattr(obj, name):
            obj = getattr(obj, name)
        else:
            return None
    return obj


def _stub_params(node: ast.FunctionDef, method: bool) -> list[tuple[str, str, str | None]]:
    """(name, kind, default) of each parameter of a stub ``def`` (a method's first left out)."""
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = [(p.arg, "positional", None if d is None else ast.unparse(d)) for p, d in zip(positional, defaults, strict=True)]
    if a.vararg:
        out.append((a.vararg.arg, "*args", None))
    out += [(p.arg, "keyword", None if d is None else ast.unparse(d)) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    if a.kwarg:
        out.append((a.kwarg.arg, "**kwargs", None))
    return out[1:] if method and out else out


def _runtime_params(obj: Any, method: bool) -> list[tuple[str, str, str | None]] | None:
    """Return the same for the extension's callable, from ``inspect.signature``; None where it has none."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: "positional",
        inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
        inspect.Parameter.VAR_POSITIONAL: "*args",
        inspect.Parameter.KEYWORD_ONLY: "keyword",
        inspect.Parameter.VAR_KEYWORD: "**kwargs",
    }
    out = [(p.name, kinds[p.kind], None if p.default is inspect.Parameter.empty else repr(p.default)) for p in sig.parameters.values()]
    return out[1:] if method and out else out


def signature_problems(text: str, ext: Any) -> list[str]:
    """Where the stub's signatures differ from the extension's (names, order, keyword-only, defaults)."""
    problems: list[str] = []

    def visit(body: list[ast.stmt], path: list[str], in_class: bool) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, [*path, node.name], True)
            elif isinstance(node, ast.FunctionDef) and not node.name.startswith("__"):
                decorators = {ast.unparse(d) for d in node.decorator_list}
                if decorators & {"property", "overload", "typing.overload"} or any(d.endswith(".setter") for d in decorators):
                    continue
                obj = _runtime(ext, [*path, node.name])
                if obj is None or not callable(obj):
                    continue
                method = in_class and "staticmethod" not in decorators
                got = _runtime_params(obj, method)
                if got is not None and got != _stub_params(node, method):
                    problems.append(f"{'.'.join([*path, node.name])}: the stub has {_stub_params(node, method)}, the extension {got}")

    visit(ast.parse(text).body, [], False)
    return problems


def regenerate(text: str, ext: Any) -> str:
    """``text`` (the stub) with the shared signatures copied and every docstring replaced by the extension's."""
    text = shared_signatures(text)
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
    problems = signature_problems(new, _cudecomp)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        print("\nThe stub's signatures differ from the extension's: fix them in python/cudecomp/_cudecomp.pyi", file=sys.stderr)
        return 1
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
