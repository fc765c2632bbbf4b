"""Griffe extension: document the fields of ``GridDescConfig`` and ``GridDescAutotuneOptions``.

Those fields are descriptors (``_ArrayField``, ``_EnumField``, ``_ScalarField``) whose
last argument is the field's help text. Read statically, griffe only sees an assignment
of a call; this extension turns the call into what a reader wants: the help text as the
docstring, the field's type as the annotation and its default as the value.
"""

from __future__ import annotations

import ast
from typing import Any

import griffe

_ARRAY_DTYPES = {"int": "int32", "bool": "bool", "float": "float64"}


def _callee(call: ast.Call) -> str:
    """Name of the called descriptor class (``_ArrayField[int](...)`` -> ``_ArrayField``)."""
    func = call.func
    if isinstance(func, ast.Subscript):
        func = func.value
    return func.id if isinstance(func, ast.Name) else ""


class ConfigFields(griffe.Extension):
    """Give descriptor-backed configuration fields a docstring, a type and a default."""

    def on_attribute_instance(self, *, node: ast.AST | griffe.ObjectNode, attr: griffe.Attribute, agent: Any, **kwargs: Any) -> None:
        """Rewrite one attribute when it is assigned a field descriptor."""
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            return
        call = node.value
        kind = _callee(call)
        args = call.args
        if kind not in {"_ArrayField", "_EnumField", "_ScalarField"} or not args:
            return
        doc = args[-1]
        if not (isinstance(doc, ast.Constant) and isinstance(doc.value, str)):
            return
        parent = attr.parent
        text = doc.value
        if kind == "_ArrayField" and len(args) == 4:
            shape = ast.literal_eval(args[0])
            dtype = _ARRAY_DTYPES.get(ast.literal_eval(args[1]), "?")
            default = ast.literal_eval(args[2])
            text += (
                f"\n\nA writable NumPy `{dtype}` array of shape `{shape}`, every element `{default!r}` by default. "
                "Assign elements or slices in place, or the whole field from a tuple, list or array."
            )
            attr.annotation = "numpy.ndarray"
            attr.value = None
        elif kind == "_EnumField" and len(args) == 3:
            attr.annotation = griffe.safe_get_annotation(args[0], parent=parent)  # type: ignore[arg-type]
            attr.value = griffe.safe_get_expression(args[1], parent=parent)  # type: ignore[arg-type]
        elif kind == "_ScalarField" and len(args) == 3:
            attr.annotation = griffe.safe_get_annotation(args[0], parent=parent)  # type: ignore[arg-type]
            attr.value = griffe.safe_get_expression(args[1], parent=parent)  # type: ignore[arg-type]
        attr.docstring = griffe.Docstring(text, lineno=doc.lineno, endlineno=doc.end_lineno, parent=attr)
