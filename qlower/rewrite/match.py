"""Patterns compiled to matcher closures (continuation-passing, with backtracking).

Each operand pattern becomes `f(value, env, k)`: it checks and binds, calls the
continuation `k(env)`, and undoes its bindings when `k` fails, so choice
points (commutative operands, alternatives) backtrack through the whole rest
of the match, guards included. Nothing here allocates on the common path
beyond the bindings themselves.

Why a candidate fails is told to an optional `MatchTrace` (as MLIR's
`notifyMatchFailure`), carried in the environment under `LISTEN` only while
`qlower explain` asks: the reports are built on the failure branches, so a
match without a listener pays one dictionary probe per failure and nothing on
success.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import numpy as np

from qlower.diagnostics import Span
from qlower.graph.core import Op, Value
from qlower.graph.types import canonical_dtype
from qlower.lang import ast
from qlower.lang.functions import FunctionTable

class ControlKey:
    """A key of the engine's own state in a match environment. Bindings are keyed by their
    names (strings), so no capture a rule names can ever read or overwrite one of these."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


Env = dict[Any, Any]  # capture name (str) → bound value; ControlKey → engine state
K = Callable[[Env], Any]
ValueMatcher = Callable[[Any, Env, K], Any]
OPS = ControlKey("ops")  # the ops matched so far: list of (matched op, shared flag)
LISTEN = ControlKey("listen")  # the MatchTrace being told why a match fails (only while explaining)
_MISSING = object()

# dtype families a value type may name besides concrete dtypes
_FAMILIES = {
    "float": ("float16", "float32", "float64"),
    "int": ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"),
    "any": None,
}

# how far a failed attempt got, for choosing the one to show: pattern < interior uses < guards
STAGES = {"pattern": 0, "uses": 1, "guard": 2}


@attrs.frozen
class MatchFailure:
    """One reason an attempt stopped, with what the attempt had matched and bound by then."""

    message: str
    span: Span | None
    stage: str
    ops: tuple[Op, ...]
    bindings: Mapping[str, Any]

    @property
    def progress(self) -> tuple[int, int, int]:
        return STAGES.get(self.stage, 0), len(self.ops), len(self.bindings)


@attrs.define
class MatchTrace:
    """The failure listener: collects every reason the matcher gives while it tries one op.

    A backtracking match fails many times before it gives up; `best` is the
    attempt that got furthest (the first of equals: the order the rule states).
    """

    failures: list[MatchFailure] = attrs.Factory(list)

    def failed(self, message: str, span: Span | None, env: Env, stage: str = "pattern") -> None:
        bindings = {k: v for k, v in env.items() if k.__class__ is str}
        self.failures.append(MatchFailure(message, span, stage, tuple(o for o, _ in env.get(OPS, ())), bindings))

    def mark(self) -> int:
        return len(self.failures)

    def take(self, start: int) -> list[MatchFailure]:
        """Remove and return the failures reported since `mark()` returned `start`."""
        got = self.failures[start:]
        del self.failures[start:]
        return got

    def best(self) -> MatchFailure | None:
        best: MatchFailure | None = None
        for f in self.failures:
            if best is None or f.progress > best.progress:
                best = f
        return best


def _tell(env: Env, message: str, span: Span | None, stage: str = "pattern") -> None:
    """Report a failure to the listener; callers test `LISTEN in env` first, so that a match
    nobody listens to does not even build the message."""
    env[LISTEN].failed(message, span, env, stage)


def _types(pat: ast.OpPattern) -> str:
    return " | ".join(pat.op_types)


def _dims_text(dims: tuple[ast.DimPat, ...]) -> str:
    words = {"any": "_", "rest": "..."}
    return "[" + ", ".join(words.get(d.kind, str(d.value)) for d in dims) + "]"


def _shape_text(shape) -> str:
    return "?" if shape is None else str(list(shape))


class PatternCompiler:
    """Compiles the op patterns of one rule; `decls` gives attribute defaults."""

    def __init__(self, decls: Mapping[str, ast.OpDecl], functions: FunctionTable) -> None:
        self.decls = decls
        self.functions = functions
        self.op_count = 0

    # ------------------------------------------------------------ value types
    def value_type(self, vt: ast.ValueType | None,
                   span: Span | None = None) -> Callable[[Value, Env], list[str] | None] | None:
        if vt is None or (not vt.const and vt.dtype is None and vt.shape is None):
            return None
        const = vt.const
        dtypes: tuple[str, ...] | None = None
        if vt.dtype is not None:
            if vt.dtype in _FAMILIES:
                dtypes = _FAMILIES[vt.dtype]
            else:
                dtypes = (canonical_dtype(vt.dtype) or vt.dtype,)
        dims = vt.shape
        where = vt.span or span

        def check(v: Value, env: Env) -> list[str] | None:
            if const and v.data is None:
                if LISTEN in env:
                    _tell(env, f"{v.name} must be a constant", where)
                return None
            if dtypes is not None and v.dtype.name not in dtypes:
                if LISTEN in env:
                    _tell(env, f"{v.name} is {v.dtype.name}, the pattern wants {vt.dtype}", where)
                return None
            if dims is None:
                return []
            added = _match_dims(dims, v.shape, env)
            if added is None:
                if LISTEN in env:
                    _tell(env, f"{v.name} has shape {_shape_text(v.shape)}, which does not fit the pattern "
                               f"{_dims_text(dims)}" + _dim_bindings(dims, env), where)
            return added

        return check

    # ---------------------------------------------------------------- operands
    def operand(self, pat: ast.OperandPat) -> ValueMatcher:
        if isinstance(pat, ast.Capture):
            return self._capture(pat.name, self.value_type(pat.type, pat.span), optional=pat.optional,
                                 span=pat.span)
        if isinstance(pat, ast.Wildcard):
            check = self.value_type(pat.type, pat.span)
            if check is None:
                return lambda v, env, k: k(env)
            span = pat.span

            def wild(v, env, k):
                if v is None:
                    if LISTEN in env:
                        _tell(env, "the operand is absent", span)
                    return None
                added = check(v, env)
                if added is None:
                    return None
                r = k(env)
                if r is None:
                    for a in added:
                        del env[a]
                return r
            return wild
        if isinstance(pat, ast.OpPattern):
            return self.nested(pat, ())
        if isinstance(pat, ast.NamedNested):
            inner = self.nested(pat.pattern, ())
            return self._capture(pat.name, None, inner, span=pat.span)
        if isinstance(pat, ast.Alternatives):
            options = [self.operand(o) for o in pat.options]
            span = pat.span

            def alt(v, env, k):
                lis = env.get(LISTEN)
                if lis is not None:
                    return _alternatives_traced(options, v, env, k, lis, span)
                for o in options:
                    r = o(v, env, k)
                    if r is not None:
                        return r
                return None
            return alt
        raise TypeError(f"not an operand pattern: {pat!r}")  # RestCapture is handled by the list

    def _capture(self, name: str, check, then: ValueMatcher | None = None, optional: bool = False,
                 span: Span | None = None) -> ValueMatcher:
        def cap(v, env, k):
            if v is None:
                if not optional:
                    if LISTEN in env:
                        _tell(env, f"operand `{name}` is absent", span)
                    return None
                if env.get(name, _MISSING) is not _MISSING:
                    if LISTEN in env:
                        _tell(env, f"optional operand `{name}` is absent, but `{name}` is already bound", span)
                    return None
                env[name] = None  # `b?` with no such operand: bound to none
                r = k(env)
                if r is None:
                    del env[name]
                return r
            cur = env.get(name, _MISSING)
            if cur is not _MISSING:
                if cur is not v:
                    if LISTEN in env:
                        _tell(env, f"`{name}` is already {_name(cur)}, here it would be {v.name}", span)
                    return None
                return then(v, env, k) if then is not None else k(env)
            added = () if check is None else check(v, env)
            if added is None:
                return None
            env[name] = v
            r = then(v, env, k) if then is not None else k(env)
            if r is None:
                del env[name]
                for a in added:
                    del env[a]
            return r
        return cap

    # --------------------------------------------------------------------- ops
    def nested(self, pat: ast.OpPattern, binders: tuple[str, ...], rest: bool = False) -> ValueMatcher:
        """Matches the producer of a value against `pat`."""
        body = self.op_body(pat, binders, rest)
        span = pat.span

        def nest(v, env, k):
            if v is None:
                if LISTEN in env:
                    _tell(env, f"expected an op of type {_types(pat)}, but the operand is absent", span)
                return None
            op = v.producer
            if op is None:
                if LISTEN in env:
                    _tell(env, f"expected an op of type {_types(pat)}, but {v.name} has no producer "
                               f"(a graph input or constant)", span)
                return None
            return body(op, env, k)
        return nest

    def op_body(self, pat: ast.OpPattern, binders: tuple[str, ...], rest: bool = False) -> Callable[[Op, Env, K], Any]:
        self.op_count += 1
        types = frozenset(pat.op_types)
        attrs = self._attrs(pat)
        operands = self._operand_list(pat)
        shared = pat.shared
        bind_results = _result_binder(binders, rest, pat.span)
        span = pat.span

        def body(op: Op, env: Env, k: K):
            if op.type not in types:
                if LISTEN in env:
                    _tell(env, f"node {op.name} is {op.type}, not {_types(pat)}", span)
                return None
            added = attrs(op, env) if attrs is not None else ()
            if added is None:
                return None
            bound = bind_results(op, env)
            if bound is None:
                for a in added:
                    del env[a]
                return None
            env[OPS].append((op, shared))
            r = operands(op, env, k)
            if r is None:
                env[OPS].pop()
                for a in added:
                    del env[a]
                for a in bound:
                    del env[a]
            return r
        return body

    def _attrs(self, pat: ast.OpPattern):
        checks: list[tuple[str, str, Any, dict[str, Any], Span | None]] = []
        for ap in pat.attrs:
            if ap.kind == "any":
                continue
            defaults: dict[str, Any] = {}  # per op type: with `A | B` each type keeps its own default
            for t in pat.op_types:
                decl = self.decls.get(t)
                for ad in (decl.attrs if decl is not None else ()):
                    if ad.name == ap.name and ad.default is not None:
                        from qlower.rewrite.expr import constant
                        defaults[t] = constant(ad.default, self.functions)
            checks.append((ap.name, ap.kind, ap.value, defaults, ap.span))
        if not checks:
            return None

        def attrs(op: Op, env: Env) -> list[str] | None:
            added: list[str] = []
            a = op.attrs
            for name, kind, value, defaults, span in checks:
                got = a.get(name, _MISSING)
                if got is _MISSING:
                    got = defaults.get(op.type)
                if kind == "literal":
                    if not _same_literal(got, value):
                        for x in added:
                            del env[x]
                        if LISTEN in env:
                            _tell(env, f"attribute {name} of {op.name} is "
                                       f"{'absent' if got is None else repr(got)}, the pattern wants {value!r}", span)
                        return None
                else:
                    if isinstance(got, np.ndarray):  # a QNN op's tensor param (a cleanup rule's match)
                        got = got.tolist()
                    cur = env.get(value, _MISSING)
                    if cur is _MISSING:
                        env[value] = got
                        added.append(value)
                    elif cur != got:
                        for x in added:
                            del env[x]
                        if LISTEN in env:
                            _tell(env, f"attribute {name} of {op.name} is {got!r}, but `{value}` is already "
                                       f"{cur!r}", span)
                        return None
            return added
        return attrs

    def _operand_list(self, pat: ast.OpPattern):
        fixed = [p for p in pat.operands if not isinstance(p, ast.RestCapture)]
        rest = next((p.name for p in pat.operands if isinstance(p, ast.RestCapture)), None)
        fs = [self.operand(p) for p in fixed]
        n = len(fs)
        commutative = pat.commutative or any(
            self.decls.get(t) is not None and self.decls[t].commutative for t in pat.op_types)
        commutative = commutative and n == 2 and rest is None
        span = pat.span

        def run(ops: list, i: int, env: Env, k: K):
            if i == n:
                if rest is None:
                    return k(env)
                env[rest] = list(ops[n:])
                r = k(env)
                if r is None:
                    del env[rest]
                return r
            return fs[i](ops[i] if i < len(ops) else None, env, lambda e: run(ops, i + 1, e, k))

        def operands(op: Op, env: Env, k: K):
            ops = op.operands
            m = len(ops)
            while m > n and ops[m - 1] is None:
                m -= 1
            if rest is None and m > n:
                if LISTEN in env:
                    _tell(env, f"{op.name} has {m} operands, the pattern {n}", span)
                return None
            if rest is not None and m < n:
                if LISTEN in env:
                    _tell(env, f"{op.name} has {m} operands, the pattern needs at least {n}", span)
                return None
            ops = ops[:m] if m < len(ops) else ops
            r = run(ops, 0, env, k)
            if r is None and commutative and len(ops) == 2:
                r = run([ops[1], ops[0]], 0, env, k)
            return r
        return operands


def _alternatives_traced(options: list[ValueMatcher], v, env: Env, k: K, lis: MatchTrace, span: Span | None):
    """`(A | B)` while a listener listens: options that fail on their own are reported as one failure."""
    local: list[MatchFailure] = []
    any_reached = False
    for o in options:
        reached = False

        def k2(e):
            nonlocal reached
            reached = True
            return k(e)
        start = lis.mark()
        r = o(v, env, k2)
        if r is not None:
            return r
        if not reached:  # the option itself failed (not something after it): fold its reasons in
            local.extend(lis.take(start))
        any_reached = any_reached or reached
    if local:
        deepest = max(local, key=lambda f: f.progress)
        message = ("the other alternatives do not match: " if any_reached else "no alternative matches: ") \
            + "; ".join(f.message for f in local)
        lis.failures.append(attrs.evolve(deepest, message=message, span=span))
    return None


def _name(v: Any) -> str:
    return v.name if isinstance(v, Value) else repr(v)


def _dim_bindings(dims: tuple[ast.DimPat, ...], env: Env) -> str:
    known = [f"{d.value} = {env[d.value]}" for d in dims if d.kind == "capture" and d.value in env]
    return f" (with {', '.join(known)})" if known else ""


def _result_binder(binders: tuple[str, ...], rest: bool, span: Span | None = None):
    if not binders:
        return lambda op, env: ()
    if rest:
        (name,) = binders

        def bind_rest(op: Op, env: Env):
            cur = env.get(name, _MISSING)
            if cur is not _MISSING:
                if cur == op.results:
                    return ()
                if LISTEN in env:
                    _tell(env, f"`{name}` is already bound to other values than the results of {op.name}", span)
                return None
            env[name] = list(op.results)
            return (name,)
        return bind_rest

    def bind(op: Op, env: Env):
        if len(op.results) != len(binders):
            if LISTEN in env:
                _tell(env, f"{op.name} has {len(op.results)} result(s), the pattern binds {len(binders)}", span)
            return None
        added = []
        for name, r in zip(binders, op.results):
            if name == "_":
                continue
            cur = env.get(name, _MISSING)
            if cur is _MISSING:
                env[name] = r
                added.append(name)
            elif cur is not r:
                for a in added:
                    del env[a]
                if LISTEN in env:
                    _tell(env, f"`{name}` is already {_name(cur)}, here it would be {r.name}", span)
                return None
        return added
    return bind


def _match_dims(dims: tuple[ast.DimPat, ...], shape: tuple[int, ...] | None, env: Env) -> list[str] | None:
    if shape is None:
        return None
    kinds = [d.kind for d in dims]
    if "rest" in kinds:
        r = kinds.index("rest")
        head, tail = dims[:r], dims[r + 1:]
        if len(shape) < len(head) + len(tail):
            return None
        pairs = list(zip(head, shape[:len(head)])) + list(zip(tail, shape[len(shape) - len(tail):]))
    else:
        if len(shape) != len(dims):
            return None
        pairs = list(zip(dims, shape))
    added: list[str] = []
    for d, s in pairs:
        if d.kind == "int":
            ok = s == d.value
        elif d.kind == "capture":
            cur = env.get(d.value, _MISSING)
            if cur is _MISSING:
                env[d.value] = s
                added.append(d.value)
                ok = True
            else:
                ok = cur == s
        else:
            ok = True
        if not ok:
            for a in added:
                del env[a]
            return None
    return added


def _same_literal(got: Any, want: Any) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(got, (bool, int)) and isinstance(want, (bool, int)) and bool(got) == bool(want) \
            and (got in (0, 1))
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return got == want
    return got == want


def simple_root(compiler: PatternCompiler, pat: ast.OpPattern, binders: tuple[str, ...], rest: bool,
                finish: Callable[[Env], Env | None] | None):
    """A straight-line matcher for the common root pattern — one op, plain or typed captures,
    attribute captures/literals — or None when the pattern needs the general matcher.

    Commutative two-operand ops try the swapped order only when the first one
    fails (a type constraint or a guard in `finish`). tests/rewrite/test_match_differential.py
    pins it to the general matcher (same match or no match, same bindings).
    """
    commutative = pat.commutative or any(
        compiler.decls.get(t) is not None and compiler.decls[t].commutative for t in pat.op_types)
    if rest:
        return None
    caps: list[tuple[str | None, Any, Span | None]] = []
    optional: list[bool] = []
    for p in pat.operands:
        if isinstance(p, ast.Capture):
            caps.append((p.name, compiler.value_type(p.type, p.span), p.span))
            optional.append(p.optional)
        elif isinstance(p, ast.Wildcard) and p.type is None:
            caps.append((None, None, p.span))
            optional.append(True)
        else:
            return None
    if any(o and c[0] is not None for o, c in zip(optional, caps)) and any(
            not o for o in optional[optional.index(True):]):
        return None  # an optional capture before a required operand: the general matcher decides
    names = [c for c, _, _ in caps if c is not None]
    if len(set(names)) != len(names) or set(names) & set(binders):
        return None
    compiler.op_count += 1
    types = frozenset(pat.op_types)
    attrs = compiler._attrs(pat)
    n = len(caps)
    # trailing untyped `_` may stand for absent optional operands (shorter operand lists)
    least = n
    while least and optional[least - 1]:
        least -= 1
    results = tuple(binders)
    nres = len(results)
    swap = commutative and n == 2
    span = pat.span

    def bind(op: Op, ops, lis: MatchTrace | None) -> Env | None:
        env: Env = {OPS: [(op, False)]}
        if lis is not None:
            env[LISTEN] = lis
        for i, (name, check, where) in enumerate(caps):
            if name is None:
                continue
            v = ops[i] if i < len(ops) else None
            if v is None:
                if optional[i]:
                    env[name] = None
                    continue
                if LISTEN in env:
                    _tell(env, f"operand `{name}` is absent", where)
                return None
            if check is not None and check(v, env) is None:
                return None
            env[name] = v
        if attrs is not None and attrs(op, env) is None:
            return None
        if nres:
            if len(op.results) != nres:
                if LISTEN in env:
                    _tell(env, f"{op.name} has {len(op.results)} result(s), the pattern binds {nres}", span)
                return None
            for name, r in zip(results, op.results):
                if name != "_":
                    env[name] = r
        return env if finish is None else finish(env)

    def match(op: Op, listener: MatchTrace | None = None) -> Env | None:
        if op.type not in types:
            if listener is not None:
                listener.failed(f"node {op.name} is {op.type}, not {_types(pat)}", span, {OPS: []})
            return None
        ops = op.operands
        m = len(ops)
        while m > n and ops[m - 1] is None:
            m -= 1
        if m > n or m < least:
            if listener is not None:
                listener.failed(f"{op.name} has {m} operands, the pattern {n}", span, {OPS: [(op, False)]})
            return None
        env = bind(op, ops, listener)
        if env is None and swap and m == 2:  # (an absent optional second operand has no other order)
            env = bind(op, (ops[1], ops[0]), listener)
        if env is not None and listener is not None:
            env.pop(LISTEN, None)
        return env
    return match


def producer_filter(compiler: PatternCompiler, pat: ast.OpPattern) -> Callable[[Op], bool] | None:
    """A quick necessary condition for the general matcher on root pattern `pat`: each operand the
    pattern matches with a nested op pattern is produced by an op of a type it names (in either
    order of a commutative pair); None when `pat` nests none.

    Cleanup rules (`qnn.Sigmoid(qnn.Transpose(x))`) are tried on every target op of their root
    types and almost never match; this turns most tries away without building an environment.
    It runs only where nobody listens for reasons (`qlower explain` wants the matcher's).
    """
    fixed = [p for p in pat.operands if not isinstance(p, ast.RestCapture)]
    needs: list[tuple[int, frozenset[str]]] = []
    for i, p in enumerate(fixed):
        q = p.pattern if isinstance(p, ast.NamedNested) else p
        if isinstance(q, ast.OpPattern):
            needs.append((i, frozenset(q.op_types)))
    if not needs:
        return None
    swap = len(fixed) == 2 and len(fixed) == len(pat.operands) and (pat.commutative or any(
        compiler.decls.get(t) is not None and compiler.decls[t].commutative for t in pat.op_types))

    def fits(ops: list) -> bool:
        n = len(ops)
        for i, types in needs:
            v = ops[i] if i < n else None
            if v is None:
                return False
            p = v.producer
            if p is None or p.type not in types:
                return False
        return True

    if not swap:
        return lambda op: fits(op.operands)

    def check(op: Op) -> bool:
        ops = op.operands
        return fits(ops) or (len(ops) >= 2 and fits([ops[1], ops[0]]))
    return check
