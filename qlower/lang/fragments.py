"""Inlining fragments and `def`s into the rules that use them, and the scopes they are visible in.

A call `r = f(a, xs..., expr, qnn.Op)` becomes f's emit items with its parameters replaced
by the arguments (a value parameter by the value's name, any parameter used in an
expression by the argument expression, a `k: op` parameter by the op type, so `k(...)`
in the body becomes an emitted op), its results renamed to the call's binders and every
other name it binds made private to the call (`_f1_name`), so two calls never clash.
A call `d(args)` of a `def d(params) = expr` in any expression becomes `expr` with the
parameters replaced by the argument expressions. A call that does not resolve (unknown
fragment, wrong arity) is left in place for the checker to report.

Visibility (`Scope`): a file sees its own fragments and defs, those of every file of its
pack (or of the folder a user named, loaded as one), and other packs' fragments qualified
(`onnx.to_nhwc(x)`). The parser inlines a
file's own; the loader, which sees the whole rule set, inlines again with the pack's.
All of it happens once when rules load, never per matched node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from qlower.lang import ast

_DEPTH = 8  # nested fragment calls / def calls expanded; deeper (recursive) ones are left for the checker


@attrs.frozen
class Scope:
    """The fragments and defs one file can call, by the name it calls them."""

    fragments: Mapping[str, ast.Fragment] = attrs.field(factory=dict)
    defines: Mapping[str, ast.Define] = attrs.field(factory=dict)

    @property
    def empty(self) -> bool:
        return not self.fragments and not self.defines


def file_scope(module: ast.Module) -> Scope:
    return Scope({f.name: f for f in reversed(module.fragments)}, {d.name: d for d in reversed(module.defines)})


def group_of(m: ast.Module, groups: Mapping[str, str] | None = None) -> str:
    """What shares fragments and defs with a file: its pack, else the folder it was loaded as part of
    (`groups`: file → folder), else the file alone."""
    if m.namespace:
        return "pack:" + m.namespace
    return "folder:" + groups[m.file] if groups and m.file in groups else "file:" + m.file


def pack_scopes(modules: Sequence[ast.Module], op_names: set[str] | frozenset[str] = frozenset(),
                groups: Mapping[str, str] | None = None) -> dict[int, Scope]:
    """Each module's scope (by id): the fragments and defs of its pack (or of the folder a user named,
    or its own file), plus every pack's fragments as `pack.name` unless an op has that name."""
    by_group: dict[str, tuple[dict, dict]] = {}
    for m in modules:
        frags, defs = by_group.setdefault(group_of(m, groups), ({}, {}))
        for f in m.fragments:
            frags.setdefault(f.name, f)
        for d in m.defines:
            defs.setdefault(d.name, d)
    qualified = {f"{m.namespace}.{f.name}": f for m in modules if m.namespace for f in m.fragments
                 if f"{m.namespace}.{f.name}" not in op_names}
    out: dict[int, Scope] = {}
    for m in modules:
        own = file_scope(m)
        frags, defs = by_group[group_of(m, groups)]
        out[id(m)] = Scope({**qualified, **frags, **own.fragments}, {**defs, **own.defines})
    return out


def with_inlined_rules(module: ast.Module, scope: Scope | None = None) -> ast.Module:
    """`module` with its rules (`map` lines as the rules they stand for) built once, its fragment
    and def calls inlined from `scope` (default: the file's own)."""
    scope = file_scope(module) if scope is None else scope
    rules = tuple(inline(i.rule if isinstance(i, ast.MapDecl) else i, scope)
                  for i in module.items if isinstance(i, (ast.Rule, ast.MapDecl)))
    return attrs.evolve(module, inlined_rules=rules)


def inline(rule: ast.Rule, scope: Scope | Mapping[str, ast.Fragment]) -> ast.Rule:
    """`rule` with its fragment and def calls expanded (the same object when it has none)."""
    if not isinstance(scope, Scope):
        scope = Scope(scope)
    if scope.empty:
        return rule
    qualified = any("." in n for n in scope.fragments)
    if not scope.defines and not any(isinstance(i, ast.FragmentCall) or (qualified and isinstance(i, ast.EmitOp)
                                                                           and i.op in scope.fragments)
                                     for i in rule.emits):
        return rule
    counter = [0]
    body = tuple(attrs.evolve(s, items=_items(s.items, scope, counter, 0)) if isinstance(s, ast.Emit) else s
                 for s in rule.body)
    if scope.defines:
        body = tuple(_defs_in_stmt(s, scope.defines) for s in body)
    new = attrs.evolve(rule, body=body)
    return rule if new == rule else new


def resolves(call: ast.FragmentCall, fragments: Mapping[str, ast.Fragment] | Scope) -> bool:
    if isinstance(fragments, Scope):
        fragments = fragments.fragments
    f = fragments.get(call.name)
    return (f is not None and len(f.params) == len(call.args) and len(f.results) == len(call.binders.names)
            and not call.binders.rest and not call.params and not call.props
            and all(_fits(p, a) for p, a in zip(f.params, call.args)))


def _fits(p: ast.FragmentParam, a: ast.Arg) -> bool:
    if p.rest:
        return a.kind == "rest"
    if p.op:
        return a.kind in ("op", "expr")
    return a.kind == "expr"


def as_call(item: ast.EmitOp) -> ast.FragmentCall | None:
    """`pack.frag(x, xs...)` parsed as an op: the fragment call it is (None if an argument is `_` or
    `tensor(...)`, or it has params, which no fragment call has)."""
    if item.params or item.props or item.fold or item.default or any(a.kind in ("none", "tensor") for a in item.args):
        return None
    args = tuple(a if a.kind == "rest" else ast.Arg("expr", expr=ast.Name(a.name, span=a.span), span=a.span)
                 for a in item.args)
    return ast.FragmentCall(item.binders, item.op, args, span=item.span)


def _items(items, scope: Scope, counter, depth: int) -> tuple:
    out: list = []
    for item in items:
        if isinstance(item, ast.EmitIf):
            out.append(attrs.evolve(item, then=_items(item.then, scope, counter, depth),
                                    otherwise=_items(item.otherwise, scope, counter, depth)))
            continue
        if isinstance(item, ast.EmitOp) and item.op in scope.fragments and item.op_expr is None:
            call = as_call(item)
            item = call if call is not None else item
        if isinstance(item, ast.FragmentCall) and depth < _DEPTH and resolves(item, scope):
            counter[0] += 1
            f = scope.fragments[item.name]
            out.extend(_items(_expand(item, f, counter[0]), scope, counter, depth + 1))
        else:
            out.append(item)
    return tuple(out)


def local_names(f: ast.Fragment) -> list[str]:
    """Names a fragment binds itself (results excluded), in both branches of its `if`s."""
    names: list[str] = []
    for item in ast.flat_items(f.body):
        bound = (item.name,) if isinstance(item, ast.EmitLet) else item.binders.names
        names.extend(n for n in bound if n != "_" and n not in f.results and n not in names)
    return names


def _expand(call: ast.FragmentCall, f: ast.Fragment, k: int) -> tuple:
    names: dict[str, str] = {r: b for r, b in zip(f.results, call.binders.names)}
    names.update({n: f"_{f.name.rpartition('.')[2]}{k}_{n}" for n in local_names(f)})
    exprs: dict[str, ast.Expr] = {}
    ops: dict[str, ast.Arg] = {}
    for p, a in zip(f.params, call.args):
        if p.op:
            ops[p.name] = a
        elif a.kind == "rest":
            names[p.name] = a.name
        elif isinstance(a.expr, ast.Name):
            names[p.name] = a.expr.id
        else:
            exprs[p.name] = a.expr
    return tuple(_item(i, names, exprs, ops) for i in f.body)


def _item(item, names: dict[str, str], exprs: dict[str, ast.Expr], ops: dict[str, ast.Arg]):
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

    def call_arg(a: ast.Arg) -> ast.Arg:
        if a.kind == "rest":
            return attrs.evolve(a, name=names.get(a.name, a.name))
        if a.kind == "expr" and isinstance(a.expr, ast.Name) and a.expr.id in ops:
            return ops[a.expr.id]  # an op parameter passed on to another fragment
        return attrs.evolve(a, expr=e(a.expr)) if a.expr is not None else a

    props = lambda ps: tuple(attrs.evolve(p, expr=e(p.expr)) for p in ps)  # noqa: E731
    if isinstance(item, ast.EmitIf):
        return attrs.evolve(item, cond=e(item.cond), then=tuple(_item(i, names, exprs, ops) for i in item.then),
                            otherwise=tuple(_item(i, names, exprs, ops) for i in item.otherwise))
    if isinstance(item, ast.EmitLet):
        return attrs.evolve(item, name=names.get(item.name, item.name), expr=e(item.expr))
    if isinstance(item, ast.EmitAlias):
        return attrs.evolve(item, binders=b(item.binders), source=names.get(item.source, item.source))
    if isinstance(item, ast.EmitTensor):
        return attrs.evolve(item, binders=b(item.binders), expr=e(item.expr), props=props(item.props))
    if isinstance(item, ast.FragmentCall) and item.name in ops:
        return _op_call(item, ops[item.name], names, exprs, e, b, props)
    if isinstance(item, ast.FragmentCall):
        return attrs.evolve(item, binders=b(item.binders), args=tuple(call_arg(a) for a in item.args),
                            params=tuple(attrs.evolve(p, expr=e(p.expr)) for p in item.params),
                            props=props(item.props))
    return attrs.evolve(item, binders=b(item.binders), args=tuple(arg(a) for a in item.args),
                        params=tuple(attrs.evolve(p, expr=e(p.expr)) for p in item.params), props=props(item.props),
                        op_expr=None if item.op_expr is None else e(item.op_expr))


def _op_call(item: ast.FragmentCall, op: ast.Arg, names, exprs, e, b, props) -> ast.EmitOp:
    """`r = k(args) {params}` where `k: op` is given `qnn.Relu` (known now) or an expression (per match)."""
    args = []
    for a in item.args:  # a call's arguments are expressions; an op takes values, lists and tensors
        if a.kind == "rest":
            args.append(attrs.evolve(a, name=names.get(a.name, a.name)))
        elif isinstance(a.expr, ast.Name) and a.expr.id not in exprs:
            args.append(ast.Arg("value", names.get(a.expr.id, a.expr.id), span=a.span))
        elif isinstance(a.expr, ast.Name):
            args.append(ast.Arg("tensor", expr=exprs[a.expr.id], span=a.span))
        else:
            args.append(ast.Arg("tensor", expr=e(a.expr), span=a.span))
    if op.kind == "op":
        name, dynamic = op.name, None
    elif isinstance(op.expr, ast.Literal) and isinstance(op.expr.value, str):
        name, dynamic = op.expr.value, None
    else:
        name, dynamic = item.name, op.expr
    return ast.EmitOp(b(item.binders), name, tuple(args), tuple(attrs.evolve(p, expr=e(p.expr)) for p in item.params),
                      props(item.props), span=item.span, op_expr=dynamic)


def _expr(x, names: dict[str, str], exprs: dict[str, ast.Expr]):
    if isinstance(x, ast.Name):
        if x.id in exprs:
            return exprs[x.id]
        return attrs.evolve(x, id=names[x.id]) if x.id in names else x
    if isinstance(x, ast.Literal):
        return x
    return ast.map_children(x, lambda c: _expr(c, names, exprs))


# ---------------------------------------------------------------------- defs


def expand_defs(x, defines: Mapping[str, ast.Define], depth: int = 0):
    """Expression `x` with every call of a def (right arity) replaced by its body."""
    if isinstance(x, (ast.Name, ast.Literal)) or x is None:
        return x
    y = ast.map_children(x, lambda c: expand_defs(c, defines, depth))
    if isinstance(y, ast.Call) and depth < _DEPTH:
        d = defines.get(y.func)
        if d is not None and len(d.params) == len(y.args):
            body = _expr(d.expr, {}, dict(zip(d.params, y.args)))
            return expand_defs(body, defines, depth + 1)
    return y


def _defs_in_item(item, defines):
    def e(x):
        return expand_defs(x, defines)

    if isinstance(item, ast.EmitIf):
        return attrs.evolve(item, cond=e(item.cond), then=tuple(_defs_in_item(i, defines) for i in item.then),
                            otherwise=tuple(_defs_in_item(i, defines) for i in item.otherwise))
    changes: dict = {}
    if isinstance(item, (ast.EmitLet, ast.EmitTensor)):
        changes["expr"] = e(item.expr)
    if hasattr(item, "props"):
        changes["props"] = tuple(attrs.evolve(p, expr=e(p.expr)) for p in item.props)
    if hasattr(item, "params"):
        changes["params"] = tuple(attrs.evolve(p, expr=e(p.expr)) for p in item.params)
    if hasattr(item, "args"):
        changes["args"] = tuple(attrs.evolve(a, expr=e(a.expr)) if a.expr is not None else a for a in item.args)
    if isinstance(item, ast.EmitOp) and item.op_expr is not None:
        changes["op_expr"] = e(item.op_expr)
    return attrs.evolve(item, **changes)


def _defs_in_stmt(s, defines):
    if isinstance(s, (ast.Require, ast.Let)):
        return attrs.evolve(s, expr=expand_defs(s.expr, defines))
    if isinstance(s, ast.Fail):
        return attrs.evolve(s, message=expand_defs(s.message, defines))
    if isinstance(s, ast.Emit):
        return attrs.evolve(s, items=tuple(_defs_in_item(i, defines) for i in s.items))
    return s


def def_calls(x, defines: Mapping[str, ast.Define]) -> list[ast.Call]:
    """Calls of defs left in `x` (wrong arity, or nested too deep)."""
    return [y for y in ast.iter_nodes(x) if isinstance(y, ast.Call) and y.func in defines]
