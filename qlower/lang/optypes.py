"""Which op types an emitted item can have, known when rules load.

A static item (`r = qnn.Relu(x)`) has its own type. An item whose type is given per match (a fragment's
`k: op` parameter passed an expression, such as `optype(y)`) can only be what that expression can
evaluate to: a string literal; `optype(v)` for `v` bound by a `match` (the op types its pattern allows,
both of an alternation `A | B`); a pick among those (`a if c else b`, `[a, b][i]`); a `let` of one.
Conditions on `optype(v)` in a `require` or an emit `if` narrow the set on their side (`if optype(y) ==
"A"` leaves only A in its branch). A fragment's `k: op` parameter is inlined at each call, so its
emitted items, taken over every rule, have the union of what the call sites pass. An expression that
can be anything (a string built per match) is open (`None`): the item is checked when the rule emits.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from qlower.lang import ast

__all__ = ["OpTypes", "emitted_op_types", "expr_op_types", "fragment_op_types"]

OpTypes = tuple[str, ...] | None  # the op types an item can have, in source order; None: open


@attrs.define
class _State:
    """What is known at one point of a rule: op types of values (by the op producing them) and of lets."""

    values: dict[str, OpTypes] = attrs.field(factory=dict)
    lets: dict[str, OpTypes] = attrs.field(factory=dict)
    lists: set[str] = attrs.field(factory=set)  # `ys...` binders of a match: `optype(ys[i])`
    dead: bool = False  # a point never reached (a narrowing left some op type no choice)

    def copy(self) -> _State:
        return _State(dict(self.values), dict(self.lets), set(self.lists), self.dead)


def _union(parts: Iterable[OpTypes]) -> OpTypes:
    out: list[str] = []
    for p in parts:
        if p is None:
            return None
        out.extend(t for t in p if t not in out)
    return tuple(out)


def _producer(e: ast.Expr, st: _State) -> str | None:
    """The value name `optype(...)` asks about: `optype(v)`, or `optype(ys[i])` for a matched list."""
    if not (isinstance(e, ast.Call) and e.func == "optype" and len(e.args) == 1):
        return None
    a = e.args[0]
    if isinstance(a, ast.Name):
        return a.id
    if isinstance(a, ast.Index) and isinstance(a.target, ast.Name) and a.target.id in st.lists:
        return a.target.id
    return None


def _types(e: ast.Expr | None, st: _State) -> OpTypes:
    if st.dead:
        return ()
    if isinstance(e, ast.Literal):
        return (e.value,) if isinstance(e.value, str) else None
    if isinstance(e, ast.Name):
        return st.lets.get(e.id)
    if isinstance(e, ast.Conditional):
        return _union((_types(e.then, _narrow(st, e.cond, True)), _types(e.otherwise, _narrow(st, e.cond, False))))
    if isinstance(e, ast.Index) and isinstance(e.target, ast.ListExpr):
        return _union(_types(i, st) for i in e.target.items)
    name = _producer(e, st) if e is not None else None
    return st.values.get(name) if name is not None else None


def _narrow(st: _State, cond: ast.Expr, truth: bool) -> _State:
    """`st` where `cond` is `truth`; only tests of `optype(v)` (or a let of op types) against string
    literals narrow (`==`, `!=`, `in [...]`, `not in [...]`, joined by `and` / `or` / `not`)."""
    if isinstance(cond, ast.Unary) and cond.op == "not":
        return _narrow(st, cond.operand, not truth)
    if not isinstance(cond, ast.Binary):
        return st
    if (cond.op == "and" and truth) or (cond.op == "or" and not truth):
        return _narrow(_narrow(st, cond.left, truth), cond.right, truth)
    left, right = cond.left, cond.right
    if cond.op in ("==", "!=") and isinstance(left, ast.Literal):
        left, right = right, left
    if cond.op in ("==", "!=") and isinstance(right, ast.Literal) and isinstance(right.value, str):
        lits: tuple[str, ...] = (right.value,)
    elif cond.op in ("in", "not in") and isinstance(right, ast.ListExpr) and all(
            isinstance(i, ast.Literal) and isinstance(i.value, str) for i in right.items):
        lits = tuple(i.value for i in right.items)
    else:
        return st
    keep = truth if cond.op in ("==", "in") else not truth
    name = _producer(left, st)
    if name is not None and st.values.get(name) is not None:
        table = "values"
    elif isinstance(left, ast.Name) and st.lets.get(left.id) is not None:
        table, name = "lets", left.id
    else:
        return st
    out = st.copy()
    have = getattr(out, table)
    have[name] = tuple(t for t in have[name] if (t in lits) == keep)
    out.dead = out.dead or not have[name]
    return out


def _bind_pattern(p: ast.OpPattern, st: _State) -> None:
    """Names a pattern gives to nested ops' results (`t = X(...)`): the types of X."""
    def operand(o) -> dict[str, OpTypes]:
        if isinstance(o, ast.NamedNested):
            return {o.name: tuple(o.pattern.op_types), **operand(o.pattern)}
        if isinstance(o, ast.OpPattern):
            out: dict[str, OpTypes] = {}
            for x in o.operands:
                out.update(operand(x))
            return out
        if isinstance(o, ast.Alternatives):
            got = [operand(x) for x in o.options]
            names = {n for g in got for n in g}
            return {n: _union(g.get(n) for g in got) for n in names}
        return {}

    st.values.update(operand(p))


def _bind(binders: ast.Binders, types: OpTypes, st: _State, default: bool = False) -> None:
    """`binders` now name values of `types`; a default (`b ?= ...`) only when `b` is absent, so either."""
    for n in binders.names:
        if n != "_":
            st.values[n] = _union((st.values.get(n), types)) if default else types
            st.lists.discard(n)


def _statement(s: ast.Stmt, st: _State, out: dict[int, OpTypes]) -> _State:
    if isinstance(s, ast.Match):
        _bind(s.binders, tuple(s.pattern.op_types), st)
        if s.binders.rest and s.binders.names:
            st.lists.add(s.binders.names[0])
        _bind_pattern(s.pattern, st)
    elif isinstance(s, ast.Let):
        st.lets[s.name] = _types(s.expr, st)
    elif isinstance(s, ast.Require):
        st = _narrow(st, s.expr, True)
    elif isinstance(s, ast.Emit):
        st = _items(s.items, st, out)
    return st


def emitted_op_types(rule: ast.Rule) -> dict[int, OpTypes]:
    """For each emitted op of `rule` (by `id`), the op types it can have; `()` when its branch can never be
    taken (its `if` contradicts the match or a `require`), None when open."""
    st, out = _State(), {}
    for s in rule.body:
        st = _statement(s, st, out)
    return out


def _items(items: Iterable[ast.EmitItem], st: _State, out: dict[int, OpTypes]) -> _State:
    for item in items:
        if isinstance(item, ast.EmitIf):
            a = _items(item.then, _narrow(st, item.cond, True).copy(), out)
            b = _items(item.otherwise, _narrow(st, item.cond, False).copy(), out)
            st = _merge(st, a, b)
        elif isinstance(item, ast.EmitLet):
            st.lets[item.name] = _types(item.expr, st)
        elif isinstance(item, ast.EmitOp):
            types = () if st.dead else (item.op,) if item.op_expr is None else _types(item.op_expr, st)
            out[id(item)] = types
            _bind(item.binders, types, st, item.default)
        elif isinstance(item, ast.EmitAlias):
            _bind(item.binders, st.values.get(item.source), st, item.default)
        else:
            _bind(item.binders, None, st)
    return st


def _merge(before: _State, a: _State, b: _State) -> _State:
    """After an `if`: a name has the types either branch gave it (the narrowing of the branches ends);
    a branch never taken gives nothing."""
    if a.dead or b.dead:
        if a.dead and b.dead:
            out = before.copy()
            out.dead = True
            return out
        return b if a.dead else a
    out = before.copy()
    for table in ("values", "lets"):
        ta, tb, to = getattr(a, table), getattr(b, table), getattr(out, table)
        for name in ta.keys() | tb.keys():
            to[name] = _union((ta[name], tb[name])) if name in ta and name in tb else ta.get(name, tb.get(name))
    return out


def expr_op_types(e: ast.Expr, rule: ast.Rule) -> OpTypes:
    """The op types expression `e` can be when `rule` is about to emit (after its matches, lets and
    requires): what an op-type argument written there would give."""
    st = _State()
    for s in rule.body:
        if not isinstance(s, ast.Emit):
            st = _statement(s, st, {})
    return _types(e, st)


def fragment_op_types(fragment: ast.Fragment, param: str, rules: Iterable[ast.Rule]) -> OpTypes:
    """The op types a fragment's `k: op` parameter `param` is given over every call of it in `rules`
    (rules as loaded, calls inlined): the union of what each call site passes, () when nothing calls it,
    None when a call passes an open expression. A `k` passed on to another fragment is not followed."""
    spans = {i.span for i in ast.flat_items(fragment.body)
             if isinstance(i, ast.FragmentCall) and i.name == param and i.span is not None}
    found: list[OpTypes] = []
    for rule in rules:
        items = [i for i in rule.emits if isinstance(i, ast.EmitOp) and i.span in spans]
        if items:
            types = emitted_op_types(rule)
            found.extend(types[id(i)] for i in items)
    return _union(found)
