"""The .qpat expression evaluator: expressions compile once into closures.

No Python `eval` anywhere: each AST node becomes a small function of the
environment (a dict of bound names). Functions come only from the table.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from qlower.graph.types import canonical_dtype
from qlower.lang import ast
from qlower.lang.functions import EvalError, FunctionTable

Env = dict[str, Any]
Compiled = Callable[[Env], Any]


def _num(x: Any, op: str) -> Any:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating, np.ndarray)):
        raise EvalError(f"`{op}` needs numbers, got {_describe(x)}")
    return x


def _describe(x: Any) -> str:
    if isinstance(x, list):
        return f"a list {x!r}" if len(x) < 10 else "a list"
    if hasattr(x, "producer"):
        return f"value {x.name}"
    return repr(x)


def _add(a, b):
    return _num(a, "+") + _num(b, "+")


def _sub(a, b):
    return _num(a, "-") - _num(b, "-")


def _mul(a, b):
    if isinstance(a, list) and isinstance(b, (int, np.integer)) and not isinstance(b, bool):
        return a * max(int(b), 0)
    if isinstance(b, list) and isinstance(a, (int, np.integer)) and not isinstance(a, bool):
        return b * max(int(a), 0)
    return _num(a, "*") * _num(b, "*")


def _div(a, b):
    if not isinstance(_num(b, "/"), np.ndarray) and b == 0:
        raise EvalError("division by zero")
    return _num(a, "/") / b


def _floordiv(a, b):
    if _num(b, "//") == 0:
        raise EvalError("division by zero")
    return _num(a, "//") // b


def _mod(a, b):
    if _num(b, "%") == 0:
        raise EvalError("modulo by zero")
    return _num(a, "%") % b


def _concat(a, b):
    if isinstance(a, str) or isinstance(b, str):
        if isinstance(a, list) or isinstance(b, list):
            raise EvalError(f"cannot join {_describe(a)} and {_describe(b)}")
        return str(a) + str(b)
    if not isinstance(a, list) or not isinstance(b, list):
        raise EvalError(f"`++` joins lists, got {_describe(a)} and {_describe(b)}")
    return a + b


def _order(fn):
    def cmp(a, b):
        try:
            return fn(a, b)
        except TypeError:
            raise EvalError(f"cannot compare {_describe(a)} with {_describe(b)}") from None
    return cmp


def _contains(a, b):
    try:
        return a in b
    except TypeError:
        raise EvalError(f"`in` needs a list on the right, got {_describe(b)}") from None


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": _add, "-": _sub, "*": _mul, "/": _div, "//": _floordiv, "%": _mod, "++": _concat,
    "==": operator.eq, "!=": operator.ne,
    "<": _order(operator.lt), "<=": _order(operator.le), ">": _order(operator.gt), ">=": _order(operator.ge),
    "in": _contains, "not in": lambda a, b: not _contains(a, b),
}


def truth(x: Any, what: str = "") -> bool:
    """`x` as a condition (`and`, `if`, `require`): a bool, numpy's included; anything else is an
    EvalError naming `what` needs it."""
    if not isinstance(x, (bool, np.bool_)):
        raise EvalError(f"{what + ' needs' if what else 'expected'} true or false, got {_describe(x)}")
    return bool(x)


_truth = truth


def _index(seq: Any, i: Any) -> Any:
    if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
        raise EvalError(f"index must be an integer, got {_describe(i)}")
    try:
        r = seq[i]
    except (IndexError, TypeError, KeyError):
        raise EvalError(f"index {i} is out of range for {_describe(seq)}") from None
    return r.item() if isinstance(r, np.generic) else r


def _slice(seq: Any, lo: Any, hi: Any) -> Any:
    if not isinstance(seq, (list, str, np.ndarray)):  # str: the checker types `s[a:b]` as str
        raise EvalError(f"cannot slice {_describe(seq)}")
    return seq[lo:hi]


def compile_expr(expr: ast.Expr, bound: Collection[str], functions: FunctionTable) -> Compiled:
    """Compile `expr`; names in `bound` are read from the environment at run time."""
    c = _Compiler(bound, functions)
    return c.compile(expr)


class _Compiler:
    def __init__(self, bound: Collection[str], functions: FunctionTable) -> None:
        self.bound = bound
        self.functions = functions

    def compile(self, e: ast.Expr) -> Compiled:
        method = getattr(self, "_" + type(e).__name__)
        return method(e)

    def _Literal(self, e: ast.Literal) -> Compiled:
        v = e.value
        return lambda env: v

    def _Name(self, e: ast.Name) -> Compiled:
        name = e.id
        if name in self.bound:
            def look(env: Env) -> Any:
                try:
                    return env[name]
                except KeyError:
                    raise EvalError(f"`{name}` is not bound here") from None
            return look
        dt = canonical_dtype(name)
        if dt is not None:
            return lambda env: dt
        raise EvalError(f"unknown name `{name}`")

    def _ListExpr(self, e: ast.ListExpr) -> Compiled:
        items = [self.compile(i) for i in e.items]
        return lambda env: [f(env) for f in items]

    def _Call(self, e: ast.Call) -> Compiled:
        fn = self.functions.get(e.func)
        if fn is None:
            raise EvalError(f"unknown function `{e.func}`")
        args = [self.compile(a) for a in e.args]
        impl = fn.impl
        name = e.func

        def call(env: Env) -> Any:
            vals = [a(env) for a in args]
            try:
                return impl(*vals)
            except EvalError:
                raise
            except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, OverflowError,
                    AttributeError) as exc:
                raise EvalError(f"{name}(...) failed: {exc}") from None
        return call

    def _Index(self, e: ast.Index) -> Compiled:
        t, i = self.compile(e.target), self.compile(e.index)
        return lambda env: _index(t(env), i(env))

    def _Slice(self, e: ast.Slice) -> Compiled:
        t = self.compile(e.target)
        lo = self.compile(e.lo) if e.lo is not None else (lambda env: None)
        hi = self.compile(e.hi) if e.hi is not None else (lambda env: None)
        return lambda env: _slice(t(env), lo(env), hi(env))

    def _Unary(self, e: ast.Unary) -> Compiled:
        f = self.compile(e.operand)
        if e.op == "not":
            return lambda env: not _truth(f(env))
        return lambda env: -_num(f(env), "-")

    def _Binary(self, e: ast.Binary) -> Compiled:
        left, right = self.compile(e.left), self.compile(e.right)
        if e.op == "and":
            return lambda env: _truth(left(env)) and _truth(right(env))
        if e.op == "or":
            return lambda env: _truth(left(env)) or _truth(right(env))
        fn = _BINARY[e.op]
        return lambda env: fn(left(env), right(env))

    def _Conditional(self, e: ast.Conditional) -> Compiled:
        then, cond, other = self.compile(e.then), self.compile(e.cond), self.compile(e.otherwise)
        return lambda env: then(env) if _truth(cond(env)) else other(env)


def constant(expr: ast.Expr, functions: FunctionTable) -> Any:
    """Evaluate an expression that uses no bound names (defaults, test params)."""
    return compile_expr(expr, (), functions)({})
