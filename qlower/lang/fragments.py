"""Inlining fragments into the rules that call them, and checking a fragment's definition.

A call `r = f(a, xs..., expr)` becomes f's emit items with its parameters replaced by
the arguments (a value parameter by the value's name, any parameter used in an
expression by the argument expression), its results renamed to the call's binders and
every other name it binds made private to the call (`_f1_name`), so two calls never
clash. A call that does not resolve (unknown fragment, wrong arity) is left in place
for the checker to report.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from qlower.lang import ast


def with_inlined_rules(module: ast.Module) -> ast.Module:
    """`module` with its rules (`map` lines as the rules they stand for) built once, fragments inlined."""
    frags = {f.name: f for f in module.fragments}
    rules = tuple(inline(i.rule if isinstance(i, ast.MapDecl) else i, frags)
                  for i in module.items if isinstance(i, (ast.Rule, ast.MapDecl)))
    return attrs.evolve(module, inlined_rules=rules)


def inline(rule: ast.Rule, fragments: Mapping[str, ast.Fragment]) -> ast.Rule:
    """`rule` with its fragment calls expanded (the same object when it has none)."""
    if not fragments or not any(isinstance(i, ast.FragmentCall) for i in rule.emits):
        return rule
    counter = [0]
    body = tuple(attrs.evolve(s, items=_items(s.items, fragments, counter, 0)) if isinstance(s, ast.Emit) else s
                 for s in rule.body)
    return attrs.evolve(rule, body=body)


def resolves(call: ast.FragmentCall, fragments: Mapping[str, ast.Fragment]) -> bool:
    f = fragments.get(call.name)
    return (f is not None and len(f.params) == len(call.args) and len(f.results) == len(call.binders.names)
            and not call.binders.rest
            and all(p.rest == (a.kind == "rest") for p, a in zip(f.params, call.args)))


def _items(items, fragments, counter, depth: int) -> tuple:
    out: list = []
    for item in items:
        if isinstance(item, ast.FragmentCall) and depth < 8 and resolves(item, fragments):
            counter[0] += 1
            out.extend(_items(_expand(item, fragments[item.name], counter[0]), fragments, counter, depth + 1))
        else:
            out.append(item)
    return tuple(out)


def local_names(f: ast.Fragment) -> list[str]:
    """Names a fragment binds itself (results excluded)."""
    names: list[str] = []
    for item in f.body:
        bound = (item.name,) if isinstance(item, ast.EmitLet) else item.binders.names
        names.extend(n for n in bound if n != "_" and n not in f.results and n not in names)
    return names


def _expand(call: ast.FragmentCall, f: ast.Fragment, k: int) -> tuple:
    names: dict[str, str] = {r: b for r, b in zip(f.results, call.binders.names)}
    names.update({n: f"_{f.name}{k}_{n}" for n in local_names(f)})
    exprs: dict[str, ast.Expr] = {}
    for p, a in zip(f.params, call.args):
        if a.kind == "rest":
            names[p.name] = a.name
        elif isinstance(a.expr, ast.Name):
            names[p.name] = a.expr.id
        else:
            exprs[p.name] = a.expr
    return tuple(_item(i, names, exprs, call.span) for i in f.body)


def _item(item, names: dict[str, str], exprs: dict[str, ast.Expr], span):
    def e(x):
        return _expr(x, names, exprs)

    def b(bs: ast.Binders) -> ast.Binders:
        return attrs.evolve(bs, names=tuple(names.get(n, n) for n in bs.names))

    def arg(a: ast.Arg) -> ast.Arg:
        if a.kind in ("value", "rest") and a.name in exprs:  # an expression where a value is needed
            return attrs.evolve(a, kind="tensor", name=None, expr=exprs[a.name]) if a.kind == "value" else a
        if a.kind in ("value", "rest"):
            return attrs.evolve(a, name=names.get(a.name, a.name))
        if a.expr is not None:
            return attrs.evolve(a, expr=e(a.expr))
        return a

    props = lambda ps: tuple(attrs.evolve(p, expr=e(p.expr)) for p in ps)  # noqa: E731
    if isinstance(item, ast.EmitLet):
        return attrs.evolve(item, name=names.get(item.name, item.name), expr=e(item.expr))
    if isinstance(item, ast.EmitAlias):
        return attrs.evolve(item, binders=b(item.binders), source=names.get(item.source, item.source))
    if isinstance(item, ast.EmitTensor):
        return attrs.evolve(item, binders=b(item.binders), expr=e(item.expr), props=props(item.props))
    if isinstance(item, ast.FragmentCall):
        return attrs.evolve(item, binders=b(item.binders), args=tuple(
            attrs.evolve(a, name=names.get(a.name, a.name)) if a.kind == "rest" else attrs.evolve(a, expr=e(a.expr))
            for a in item.args))
    return attrs.evolve(item, binders=b(item.binders), args=tuple(arg(a) for a in item.args),
                        params=tuple(attrs.evolve(p, expr=e(p.expr)) for p in item.params), props=props(item.props))


def _expr(x, names: dict[str, str], exprs: dict[str, ast.Expr]):
    if isinstance(x, ast.Name):
        if x.id in exprs:
            return exprs[x.id]
        return attrs.evolve(x, id=names[x.id]) if x.id in names else x
    if isinstance(x, ast.Literal):
        return x
    changes = {}
    for f in attrs.fields(type(x)):
        v = getattr(x, f.name)
        if attrs.has(type(v)):
            changes[f.name] = _expr(v, names, exprs)
        elif isinstance(v, tuple) and v and attrs.has(type(v[0])):
            changes[f.name] = tuple(_expr(i, names, exprs) for i in v)
    return attrs.evolve(x, **changes) if changes else x
