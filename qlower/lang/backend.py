"""`backend()`: the backend a graph is lowered for, as an expression.

Rules are compiled once per backend, so `backend()` is a constant of each engine:
`for_backend` writes it into a rule as a literal and drops the `if` branches (and
conditionals) that can then never be taken. A rule that tests only the backend thus
compiles, per backend, to the plain rule it would have been (a one-op emit keeps the
engine's straight-line path), and a branch emitting an op a backend lacks is never
planned, so never fails, on that backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from qlower.lang import ast
from qlower.lang.functions import EvalError, Function

NAME = "backend"


def _unknown() -> str:
    raise EvalError("backend() needs a backend: lower with --backend")


BACKEND_FUNCTION = Function(
    NAME, (), "str", _unknown,
    doc='the backend the graph is lowered for ("cpu", "gpu", "htp", "dsp", "lpai"); '
        'a constant of each compiled rule set, so `if backend() == "htp"` costs nothing per node')


def is_backend_call(e: Any) -> bool:
    """`backend()` with no arguments."""
    return isinstance(e, ast.Call) and e.func == NAME and not e.args


def backend_literals(e: ast.Binary) -> list[ast.Literal]:
    """The string literals `e` compares `backend()` with (`backend() == "htp"`,
    `backend() in ["cpu", "htp"]`, either side); empty when it does not."""
    if e.op in ("==", "!="):
        for a, b in ((e.left, e.right), (e.right, e.left)):
            if is_backend_call(a) and isinstance(b, ast.Literal) and isinstance(b.value, str):
                return [b]
    if e.op in ("in", "not in") and is_backend_call(e.left) and isinstance(e.right, ast.ListExpr):
        return [i for i in e.right.items if isinstance(i, ast.Literal) and isinstance(i.value, str)]
    return []


def unknown_backends(e: ast.Binary, known: Sequence[str]) -> list[ast.Literal]:
    """The literals of a backend comparison that name no backend in `known`."""
    return [lit for lit in backend_literals(e) if lit.value not in known]


# ------------------------------------------------------------- specialising

_NOT_CONSTANT = object()


def _value(e: Any) -> Any:
    """The value of an expression built from literals with comparisons and logic; _NOT_CONSTANT
    for anything else (a name, a call, arithmetic: those stay as they are)."""
    if isinstance(e, ast.Literal):
        return e.value
    if isinstance(e, ast.ListExpr):
        items = [_value(i) for i in e.items]
        return _NOT_CONSTANT if any(i is _NOT_CONSTANT for i in items) else items
    if isinstance(e, ast.Unary) and e.op == "not":
        v = _value(e.operand)
        return not v if isinstance(v, bool) else _NOT_CONSTANT
    if isinstance(e, ast.Binary):
        left = _value(e.left)
        if e.op in ("and", "or"):
            if not isinstance(left, bool):
                return _NOT_CONSTANT
            if left is (e.op == "or"):  # `true or _`, `false and _`: decided by the left side
                return left
            right = _value(e.right)
            return right if isinstance(right, bool) else _NOT_CONSTANT
        right = _value(e.right)
        if left is _NOT_CONSTANT or right is _NOT_CONSTANT:
            return _NOT_CONSTANT
        if e.op in ("==", "!="):
            return (left == right) is (e.op == "==")
        if e.op in ("in", "not in") and isinstance(right, list):
            return (left in right) is (e.op == "in")
    return _NOT_CONSTANT


def _expr(e: Any, backend: str) -> Any:
    if is_backend_call(e):
        return ast.Literal(backend, span=e.span)
    if not attrs.has(type(e)) or isinstance(e, (ast.Name, ast.Literal)):
        return e
    y = ast.map_children(e, lambda c: _expr(c, backend))
    if isinstance(y, ast.Conditional):
        c = _value(y.cond)
        if isinstance(c, bool):
            return y.then if c else y.otherwise
    if isinstance(y, (ast.Binary, ast.Unary)) and y is not e:
        v = _value(y)
        if isinstance(v, bool):
            return ast.Literal(v, span=y.span)
        if isinstance(y, ast.Binary) and y.op in ("and", "or") and _value(y.left) is (y.op == "and"):
            return y.right  # `true and p`, `false or p`: p (still checked to be a bool where it is used)
    return y


def _items(items: Sequence[Any], backend: str) -> tuple:
    out: list = []
    for item in items:
        if isinstance(item, ast.EmitIf):
            cond = _expr(item.cond, backend)
            c = _value(cond)
            if isinstance(c, bool):
                out.extend(_items(item.then if c else item.otherwise, backend))
                continue
            item = attrs.evolve(item, cond=cond, then=_items(item.then, backend),
                                otherwise=_items(item.otherwise, backend))
            out.append(item)
        else:
            out.append(ast.map_children(item, lambda c: _expr(c, backend)))
    return tuple(out)


def decide(e: ast.Expr, backend: str) -> bool | None:
    """What `e` is on `backend` when the backend alone decides it (None when it does not)."""
    v = _value(_expr(e, backend))
    return v if isinstance(v, bool) else None


def mentions_backend(x: Any) -> bool:
    """Whether `backend()` occurs anywhere in `x` (an AST node or a tuple of them)."""
    return any(is_backend_call(n) for n in ast.iter_nodes(x))


def for_backend(rule: ast.Rule, backend: str | None) -> ast.Rule:
    """`rule` as it reads on `backend`: `backend()` replaced by its name, the `if` branches and
    conditionals it decides kept or dropped, a `require` it makes true dropped. The rule itself
    when it never asks (or no backend is given: `backend()` then fails where it is evaluated)."""
    if backend is None or not mentions_backend(rule.body):
        return rule
    body: list = []
    for s in rule.body:
        if isinstance(s, ast.Emit):
            body.append(attrs.evolve(s, items=_items(s.items, backend)))
            continue
        s = ast.map_children(s, lambda c: _expr(c, backend))
        if isinstance(s, ast.Require) and _value(s.expr) is True:
            continue
        body.append(s)
    return attrs.evolve(rule, body=tuple(body))
