"""Emission: from a match to a plan, and from a plan to graph edits.

Everything that can fail (param values, shapes, backend support, dangling
results, cycles) fails while the plan is built; `commit` only applies a
finished plan, so a rewrite either happens completely or not at all.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from qlower.diagnostics import Span
from qlower.graph.core import Graph, Op, Provenance, Value
from qlower.graph.quantize import quantize_real  # the one quantizer (shared with the reference)
from qlower.graph.types import Quant, canonical_dtype
from qlower.lang import ast
from qlower.qnn.keys import NO_KEY, scalar_key
from qlower.qnn.params import ParamError, coerce_param
from qlower.qnn.registry import QnnOps, ShapeError, Sig
from qlower.rewrite.compile import CompiledRule
from qlower.rewrite.expr import compile_expr, truth
from qlower.lang.functions import EvalError, FunctionTable, RangeEncoding
from qlower.rewrite.match import OPS

Env = dict[str, Any]


_NOT = object()


class EmitFailure(Exception):
    """The rule matched but cannot emit here. `soft` failures (e.g. an op the
    backend lacks) just let the next rule try; hard ones are reported."""

    def __init__(self, message: str, span: Span | None, soft: bool = False) -> None:
        super().__init__(message)
        self.span = span
        self.soft = soft


class NewValue:
    """A value the plan will create (duck-types the parts of Value expressions read)."""

    __slots__ = ("local", "dtype", "shape", "quant", "data", "name", "users", "is_output", "is_input",
                 "producer")

    def __init__(self, local: str, dtype: np.dtype, shape: tuple[int, ...] | None,
                 quant: Quant | None = None, data: np.ndarray | None = None) -> None:
        self.local, self.dtype, self.shape, self.quant, self.data = local, dtype, shape, quant, data
        self.name = local
        self.users: list = []
        self.is_output = self.is_input = False
        self.producer = None

    @property
    def use_count(self) -> int:
        return 0


class NewOp:
    __slots__ = ("type", "args", "results", "attrs", "local")

    def __init__(self, type: str, args: list, results: list, attrs: dict, local: str) -> None:
        self.type, self.args, self.results, self.attrs, self.local = type, args, results, attrs, local


class Plan:
    __slots__ = ("ops", "values", "aliases", "renames", "retype")

    def __init__(self, ops: list[NewOp] | None = None, retype: bool = False) -> None:
        self.ops: list[NewOp] = [] if ops is None else ops
        self.values: list[NewValue] = []
        self.aliases: list[tuple[Value, Any]] = []
        # (graph output, value): an alias of a graph output — the value's producer makes the output instead
        self.renames: list[tuple[Value, Value]] = []
        self.retype = retype  # one op in place of the root, same operands and results: edit in place


def _sig_of(v: Any):
    if v is None:
        return None
    if v.shape is None:
        raise EmitFailure(f"value {v.name} has no known shape", None)
    return Sig(v.shape, v.dtype.name)


def _as_tensor(data: Any, dtype: str | None) -> np.ndarray:
    arr = np.asarray(data)
    if dtype is not None:
        return arr.astype(dtype)
    if arr.dtype.kind in "iu" and arr.dtype.itemsize == 8:
        return arr.astype(np.int32)  # QNN has no 64-bit compute
    if arr.dtype == np.float64:
        return arr.astype(np.float32)
    return arr


def resolve_encoding(enc: Any, dtype: np.dtype) -> Quant | None:
    if enc is None or isinstance(enc, Quant):
        return enc
    if isinstance(enc, RangeEncoding):
        if dtype.kind not in "iu":
            return None
        if enc.unit:
            bits = dtype.itemsize * 8 - (dtype.kind == "i")
            return Quant((2.0 ** -bits,), (0,), symmetric=dtype.kind == "i")
        return Quant.for_range(enc.lo, enc.hi, dtype.name)
    raise EvalError(f"not an encoding: {enc!r}")


class EmitProgram:
    """The compiled emit block of one rule."""

    def __init__(self, rule: CompiledRule, registry: QnnOps | Any, functions: FunctionTable, bound: set[str]) -> None:
        """`registry`: the target's op registry (`QnnOps`: definitions, constraints, shape functions);
        a bare `OpDefRegistry` is accepted and joined here (slower: once per rule)."""
        self.rule = rule
        if registry is not None and not isinstance(registry, QnnOps):
            registry = QnnOps.build(registry)
        self.registry: QnnOps | None = registry  # params, backend support and shape functions
        self.prefix = rule.target + "."  # the target dialect's ops (`qnn.`) are checked against `registry`
        root = rule.rule.matches[0]
        self.root_results = tuple(n for n in root.binders.names if n != "_")
        self.root_rest = root.binders.rest
        # `b?` captures: an absent one passes as an absent operand (or gets its `b ?= ...` default)
        self.optional = frozenset(ast.optional_captures(rule.rule))
        self.items = self._compile_items(
            [i for s in rule.rule.body if isinstance(s, ast.Emit) for i in s.items], bound, functions)

        self._support: dict[tuple[str, str], bool] = {}
        self._coerced: dict[tuple[str, Any], Any] = {}  # (param, scalar value) → QNN value
        # (id of a dynamic-op item, its op type) → the item with that type, and its checked params
        self._resolved: dict[tuple[int, str], tuple[ast.EmitOp, list]] = {}
        self._simple = self._simple_form()
        # a simple form binding the root's results in their own order can retype the root in place
        self._results_in_order = self._simple is not None and self.root_results == tuple(
            n for n in rule.rule.matches[0].binders.names)

    def _compile_items(self, items, bound: set[str], functions: FunctionTable) -> list:
        registry, cut = self.registry, len(self.prefix)
        out = []
        for item in items:
            props = {p.kind: (compile_expr(p.expr, bound, functions), p.span) for p in getattr(item, "props", ())}
            if isinstance(item, ast.EmitIf):
                branches = (self._compile_items(item.then, bound, functions),
                            self._compile_items(item.otherwise, bound, functions))
                out.append(("if", item, compile_expr(item.cond, bound, functions), branches, props))
            elif isinstance(item, ast.EmitOp):
                params = []
                for p in item.params:
                    pdef = None
                    if item.op_expr is None and item.op.startswith(self.prefix) and registry is not None:
                        pdef = registry.param(item.op[cut:], p.name)
                        if pdef is None:
                            raise ValueError(f"unknown param {p.name} for {item.op}")
                    params.append((p.name, compile_expr(p.expr, bound, functions), pdef, p.span))
                args = []
                for a in item.args:
                    args.append((a.kind, a.name, compile_expr(a.expr, bound, functions) if a.expr else None, a.span))
                dynamic = compile_expr(item.op_expr, bound, functions) if item.op_expr is not None else None
                out.append(("op", item, args, params, props) if dynamic is None
                           else ("dynop", item, args, (params, dynamic), props))
            elif isinstance(item, ast.EmitAlias):
                out.append(("alias", item, None, None, props))
            elif isinstance(item, ast.EmitLet):
                out.append(("let", item, compile_expr(item.expr, bound, functions), None, props))
            else:
                out.append(("tensor", item, compile_expr(item.expr, bound, functions), None, props))
        return out

    def _simple_form(self):
        """One op over plain captures producing exactly the root's results, no props: the
        common 1:1 lowering, planned without the general machinery."""
        if len(self.items) != 1 or self.items[0][0] != "op" or self.root_rest:
            return None
        _, item, args, params, props = self.items[0]
        if props or item.fold or item.binders.rest or tuple(item.binders.names) != self.root_results:
            return None
        if any(kind != "value" for kind, *_ in args):
            return None
        return item, tuple(name for _, name, _, _ in args), params

    def supported(self, op_type: str, backend: str | None) -> bool:
        if backend is None or self.registry is None or not op_type.startswith(self.prefix):
            return True
        key = (op_type, backend)
        ok = self._support.get(key)
        if ok is None:
            ok = self._support[key] = self.registry.supported(op_type[len(self.prefix):], backend)
        return ok

    # ----------------------------------------------------------------- plan
    def plan(self, env: Env, root: Op, backend: str | None) -> Plan:
        if self._simple is not None:
            return self._plan_simple(env, root, backend)
        plan = Plan()
        rebound = {id(env[n]) for n in self.root_results if not self.root_rest}
        if self.root_rest:
            rebound = {id(v) for v in env[self.root_results[0]]}
        produced: set[int] = set()
        self._run(self.items, plan, env, backend, rebound, produced)
        for r in root.results:
            if id(r) not in produced and (r.users or r.is_output):
                raise EmitFailure(f"result {r.name} is still used but the rule does not produce it",
                                  self.rule.rule.span)
        return plan

    def _run(self, items, plan: Plan, env: Env, backend, rebound: set[int], produced: set[int]) -> None:
        for kind, item, a, b, props in items:
            if kind not in ("let", "if") and item.default and env.get(item.binders.names[0]) is not None:
                continue  # `b ?= ...` when b is present
            try:
                if kind == "op" and item.fold:
                    self._plan_fold(plan, env, item, a, b, props, backend, rebound, produced)
                elif kind == "op":
                    self._plan_op(plan, env, item, a, b, props, backend, rebound, produced)
                elif kind == "dynop":
                    params, op_fn = b
                    item, params = self._resolve_op(item, op_fn(env), params)
                    self._plan_op(plan, env, item, a, params, props, backend, rebound, produced)
                elif kind == "if":
                    try:
                        ok = truth(a(env), "`if`")
                    except EvalError as exc:
                        raise EmitFailure(str(exc), item.cond.span or item.span) from None
                    self._run(b[0] if ok else b[1], plan, env, backend, rebound, produced)
                elif kind == "alias":
                    self._plan_alias(plan, env, item, rebound, produced)
                elif kind == "let":
                    env[item.name] = a(env)
                else:
                    self._plan_tensor(plan, env, item, a, props)
            except EvalError as exc:
                raise EmitFailure(str(exc), item.span) from None

    def _resolve_op(self, item: ast.EmitOp, op: Any, params: list) -> tuple[ast.EmitOp, list]:
        """An op type known per match: a target op the registry has (a lowering rule emits no source
        op this way), its params checked against it; memoised per item and op type (two items of one
        rule resolving to one op type keep their own binders and operands)."""
        key = (id(item), op)
        got = self._resolved.get(key)
        if got is None:
            span = item.op_expr.span or item.span
            if not isinstance(op, str) or not op.startswith(self.prefix):
                raise EmitFailure(f"the op type `{item.op}` is {op!r} here, not a {self.prefix[:-1]}.* op", span)
            name = op[len(self.prefix):]
            definition = self.registry.op(name) if self.registry is not None else None
            if self.registry is not None and definition is None:
                raise EmitFailure(f"the op type `{item.op}` is {op}, which the target registry does not know",
                                  span)
            out = []
            for pname, fn, _pdef, pspan in params:
                pdef = self.registry.param(name, pname) if self.registry is not None else None
                if pdef is None and self.registry is not None:
                    raise EmitFailure(f"{op} has no param `{pname}`", pspan or span)
                out.append((pname, fn, pdef, pspan))
            given = {p[0] for p in params}
            for p in definition.params if definition is not None else ():
                if p.mandatory and p.default is None and p.name not in given:
                    raise EmitFailure(f"{op} needs param `{p.name}`, which `{item.op}(...)` does not give", span)
            got = self._resolved[key] = (attrs.evolve(item, op=op, op_expr=None), out)
        return got

    def _plan_simple(self, env: Env, root: Op, backend: str | None) -> Plan:
        item, names, params = self._simple
        op_type = item.op
        ok = self._support.get((op_type, backend))
        if ok is None:
            ok = self.supported(op_type, backend)
        if not ok:
            raise EmitFailure(f"{op_type[len(self.prefix):]} is not supported on {backend.upper()}", item.span,
                              soft=True)
        try:
            operands = [env[n] for n in names]
        except KeyError as exc:
            raise EmitFailure(f"`{exc.args[0]}` is not bound", item.span) from None
        results = root.results
        for r in results:
            if r in operands:  # identity: values compare by identity
                raise EmitFailure(f"using {r.name} here would make the result depend on itself (a cycle)",
                                  item.span)
        attrs: dict[str, Any] = {}
        memo = self._coerced
        try:
            for name, fn, pdef, span in params:
                value = fn(env)
                if pdef is not None:
                    key = (name, scalar_key(value))  # (1, 1.0 and True, -0.0 and 0.0 coerce apart)
                    got = memo.get(key, _NOT) if key[1] is not NO_KEY else _NOT
                    if got is _NOT:
                        try:
                            got = coerce_param(pdef, value)
                        except ParamError as exc:
                            raise EmitFailure(f"param {name} of {op_type}: {exc}", span) from None
                        if key[1] is not NO_KEY:
                            memo[key] = got
                    value = got
                attrs[name] = value
        except EvalError as exc:
            raise EmitFailure(str(exc), item.span) from None
        produced = [env[n] for n in self.root_results]
        if len(produced) != len(results):
            for r in results:
                if r not in produced and (r.users or r.is_output):
                    raise EmitFailure(f"result {r.name} is still used but the rule does not produce it",
                                      self.rule.rule.span)
        ops = root.operands
        k = len(operands)
        retype = self._results_in_order and len(produced) == len(results) and (
            operands == ops if len(ops) == k else operands == ops[:k] and all(o is None for o in ops[k:]))
        return Plan([NewOp(op_type, operands, produced, attrs, names[0] if names else op_type)], retype)

    def _lookup(self, env: Env, name: str, span, rebound: set[int], produced: set[int]) -> Any:
        v = env.get(name)
        if v is None:
            raise EmitFailure(f"`{name}` is not bound", span)
        if id(v) in rebound and id(v) not in produced:
            raise EmitFailure(f"using {name} here would make the result depend on itself (a cycle)", span)
        return v

    def _plan_op(self, plan: Plan, env: Env, item: ast.EmitOp, args, params, props, backend,
                 rebound: set[int], produced: set[int]) -> None:
        op_type = item.op
        is_qnn = op_type.startswith(self.prefix)
        if is_qnn and not self.supported(op_type, backend):
            raise EmitFailure(f"{op_type[len(self.prefix):]} is not supported on {backend.upper()}", item.span,
                              soft=True)
        operands: list[Any] = []
        for kind, name, fn, span in args:
            if kind == "value" and name in self.optional and env.get(name) is None:
                operands.append(None)
            elif kind == "value":
                operands.append(self._lookup(env, name, span, rebound, produced))
            elif kind == "rest":
                vals = env.get(name)
                if not isinstance(vals, list):
                    raise EmitFailure(f"`{name}` is not a list of values", span)
                for v in vals:
                    if id(v) in rebound and id(v) not in produced:
                        raise EmitFailure(f"using {v.name} here would make the result depend on itself (a cycle)",
                                          span)
                operands.extend(vals)
            elif kind == "none":
                operands.append(None)
            else:
                data = _as_tensor(fn(env), None)
                nv = NewValue(f"{item.binders.names[0] if item.binders.names else 'arg'}_const{len(plan.values)}",
                              data.dtype, data.shape, None, data)
                plan.values.append(nv)
                operands.append(nv)
        attrs: dict[str, Any] = {}
        for name, fn, pdef, span in params:
            value = fn(env)
            if pdef is not None:
                try:
                    value = coerce_param(pdef, value)
                except ParamError as exc:
                    raise EmitFailure(f"param {name} of {op_type}: {exc}", span) from None
            attrs[name] = value
        names = item.binders.names
        results: list[Any] = []
        sigs = None
        needs_sig = item.binders.rest or any(n not in self.root_results for n in names)
        entry = self.registry.get(op_type[len(self.prefix):]) if needs_sig and is_qnn and self.registry is not None \
            else None
        if entry is not None:
            try:
                sigs = entry.infer([_sig_of(o) for o in operands], attrs)
            except ShapeError as exc:
                raise EmitFailure(f"{op_type}: {exc}", item.span) from None
        if item.binders.rest and self.root_rest and names[0] == self.root_results[0]:
            results = list(env[names[0]])
            if any(id(v) in produced for v in results):
                raise EmitFailure(f"results {names[0]} are produced twice", item.span)
            produced.update(id(v) for v in results)
            plan.ops.append(NewOp(op_type, operands, results, attrs, names[0]))
            return
        if item.binders.rest:
            if sigs is None:
                raise EmitFailure(f"cannot tell how many results {op_type} has here", item.span)
            names = tuple(f"{names[0]}{i}" for i in range(len(sigs)))
        for i, name in enumerate(names):
            if name in self.root_results and not item.binders.rest:
                v = env[name]
                if id(v) in produced:
                    raise EmitFailure(f"result {name} is produced twice", item.span)
                results.append(v)
                produced.add(id(v))
                continue
            results.append(self._new_result(env, name, i, sigs, operands, props, item, op_type))
        for r in results:
            if isinstance(r, NewValue):
                plan.values.append(r)
                env[r.local] = r
        if item.binders.rest:
            env[item.binders.names[0]] = results
        plan.ops.append(NewOp(op_type, operands, results, attrs, names[0] if names else op_type))

    def _plan_fold(self, plan: Plan, env: Env, item: ast.EmitOp, args, params, props, backend,
                   rebound: set[int], produced: set[int]) -> None:
        """`y = fold OP(xs...)`: OP(OP(x0, x1), x2)...; the steps before the last are new values
        (shape and dtype inferred), the last one produces `y` with the item's props."""
        ((_, name, _, span),) = args
        vals = env.get(name)
        if not isinstance(vals, list) or len(vals) < 2:
            count = len(vals) if isinstance(vals, list) else "no"
            raise EmitFailure(f"fold {item.op} needs at least two values; `{name}` has {count}", span)
        (out,) = item.binders.names
        acc = vals[0]
        for i, v in enumerate(vals[1:], start=1):
            last = i == len(vals) - 1
            step = f"{out}_fold{i}"
            env[step + "_a"], env[step + "_b"] = acc, v
            step_args = [("value", step + "_a", None, span), ("value", step + "_b", None, span)]
            binders = item.binders if last else ast.Binders((step,), span=item.span)
            step_item = attrs.evolve(item, binders=binders, fold=False)
            try:
                self._plan_op(plan, env, step_item, step_args, params, props if last else {}, backend,
                              rebound, produced)
            finally:
                del env[step + "_a"], env[step + "_b"]
            if not last:
                acc = env[step]

    def _new_result(self, env, name, i, sigs, operands, props, item, op_type) -> NewValue:
        shape = dtype = None
        if "shape" in props:
            shape = tuple(int(d) for d in props["shape"][0](env))
        elif sigs is not None and i < len(sigs):
            shape = sigs[i].shape
        if "dtype" in props:
            dtype = np.dtype(canonical_dtype(str(props["dtype"][0](env))) or str(props["dtype"][0](env)))
        elif sigs is not None and i < len(sigs):
            dtype = np.dtype(sigs[i].dtype)
        first = next((o for o in operands if o is not None), None)
        if dtype is None and first is not None:
            dtype = first.dtype
        if shape is None:
            raise EmitFailure(f"cannot infer the shape of `{name}` produced by {op_type}; "
                              f"state it with `: shape ...`", item.span)
        if "encoding" in props:
            quant = resolve_encoding(props["encoding"][0](env), dtype)
        else:
            quant = next((o.quant for o in operands if o is not None and o.quant is not None
                          and o.dtype == dtype), None)
        return NewValue(name, dtype, shape, quant)

    def _plan_alias(self, plan: Plan, env: Env, item: ast.EmitAlias, rebound, produced) -> None:
        (name,) = item.binders.names
        src = self._lookup(env, item.source, item.span, rebound, produced)
        target = env.get(name)
        if name not in self.root_results or not isinstance(target, Value):
            env[name] = src
            return
        if target.is_output:
            # Graph outputs keep their names: an op's result that is the same tensor becomes the
            # output itself (its producer writes it; no copy). Anything else — a graph input, a
            # constant, another output, a value made here, another type — needs a copying rule.
            if not _renamable(src, target):
                raise EmitFailure(f"cannot alias graph output {target.name} to {src.name}", item.span, soft=True)
            plan.renames.append((target, src))
            produced.add(id(target))
            return
        plan.aliases.append((target, src))
        produced.add(id(target))

    def _plan_tensor(self, plan: Plan, env: Env, item: ast.EmitTensor, fn, props) -> None:
        (name,) = item.binders.names
        dtype = None
        if "dtype" in props:
            dtype = canonical_dtype(str(props["dtype"][0](env)))
        raw = np.asarray(fn(env))
        quant = None
        if "encoding" in props and dtype is not None and np.dtype(dtype).kind in "iu":
            quant = resolve_encoding(props["encoding"][0](env), np.dtype(dtype))
        if quant is not None and raw.dtype == np.dtype(dtype):
            data = raw  # already stored integers (e.g. a relaid-out quantized weight from const_value)
        elif quant is not None:
            data = quantize_real(raw, quant, np.dtype(dtype))
        else:
            data = _as_tensor(raw, dtype)
        if "shape" in props:
            data = data.reshape(tuple(props["shape"][0](env)))
        nv = NewValue(name, data.dtype, data.shape, quant, data)
        plan.values.append(nv)
        env[name] = nv


def commit(graph: Graph, plan: Plan, env: Env, rule: CompiledRule, backend_note: str | None = None) -> list[Op]:
    """Apply a finished plan; returns the new ops."""
    matched: list[tuple[Op, bool]] = env[OPS]
    root = matched[0][0]
    # an op an earlier rule emitted (a cleanup rule's match) stands for the source nodes it came from
    source = root.provenance.source if root.provenance else root.name
    prov = Provenance(rule.name, rule.location, source, _origins(matched))
    if plan.retype and len(matched) == 1:
        new = plan.ops[0]
        graph.retype(root, new.type, new.attrs, prov)
        return [root]
    # the cheap path: one op for one op with the same operands and results
    if len(plan.ops) == 1 and not plan.values and not plan.aliases and not plan.renames and len(matched) == 1:
        new = plan.ops[0]
        ops = root.operands
        m = len(ops)
        while m and ops[m - 1] is None:
            m -= 1
        if len(new.args) == m and all(a is b for a, b in zip(new.args, ops)) \
                and len(new.results) == len(root.results) \
                and all(a is b for a, b in zip(new.results, root.results)):
            graph.retype(root, new.type, new.attrs, prov)
            return [root]
    base = root.name
    graph.detach_op(root)
    real: dict[int, Value] = {}
    for nv in plan.values:
        v = graph.add_value(graph.fresh_value_name(_child_name(base, nv.local)), nv.dtype, nv.shape,
                            quant=nv.quant, data=nv.data)
        real[id(nv)] = v

    def resolve(x):
        if x is None:
            return None
        return real.get(id(x), x)

    created = []
    root_name_free = True
    for op in plan.ops:
        results = [resolve(r) for r in op.results]
        if root_name_free and any(r in root.results for r in results):
            name = graph.fresh_op_name(base)
            root_name_free = False
        else:
            name = graph.fresh_op_name(_child_name(base, op.local))
        created.append(graph.add_op(name, op.type, [resolve(a) for a in op.args], results, op.attrs, prov))
    for target, src in plan.aliases:
        graph.replace_uses(target, resolve(src))
    for target, src in plan.renames:
        producer = src.producer
        graph.replace_uses(src, target)
        graph.replace_result(producer, producer.results.index(src), target)
        graph.remove_value(src)
    for r in root.results:
        if r.producer is None and not r.users and not r.is_output and graph.has_value(r.name) \
                and graph.value(r.name) is r:
            graph.remove_value(r)
    _drop_interior(graph, matched)
    # an emitted op none of whose results is used (a root result nobody reads) is dead on arrival
    for op in reversed(created):
        if any(r.users or r.is_output for r in op.results):
            continue
        operands = [v for v in op.operands if v is not None]
        graph.remove_op(op)
        for r in op.results:
            graph.remove_value(r)
        for v in operands:  # static tensors the rule made only for it
            if v.data is not None and not v.users and not v.is_output and graph.has_value(v.name) \
                    and graph.value(v.name) is v and v.producer is None:
                graph.remove_value(v)
    created = [op for op in created if not op.dead]
    return created


def _renamable(src: Any, target: Value) -> bool:
    """Whether graph output `target` may take the place of `src`: an op's result (not an input, a
    constant or an output) holding the same kind of tensor."""
    return (isinstance(src, Value) and src.producer is not None and not src.is_output and not src.is_input
            and src.data is None and src.dtype == target.dtype and src.shape == target.shape
            and src.quant == target.quant)


def _child_name(base: str, local: str) -> str:
    """The name hint of what a rule emits as `local` in place of the op `base`: `base.local`, except
    where `base` is itself such a child (`base` = `stem.local` or `stem.local_7`, a rule that re-matches
    its own output, as an unrolled loop does): then `stem.local` again, numbered by the graph, so names
    stay short however many times the rule fires (they grew by one `.local` an application before)."""
    stem, sep, suffix = base.rpartition("_")
    if not (sep and suffix.isdigit()):
        stem = base
    if stem.endswith("." + local):
        return stem
    return f"{base}.{local}"


def _origins(matched: list[tuple[Op, bool]]) -> tuple[str, ...]:
    """The input-graph nodes behind the matched ops (an op an earlier rule emitted stands for its sources)."""
    out: dict[str, None] = {}
    for op, _ in matched:
        p = op.provenance
        for s in (p.sources if p is not None and p.sources else (op.name,)):
            out[s] = None
    return tuple(out)


def _drop_interior(graph: Graph, matched: list[tuple[Op, bool]]) -> None:
    changed = True
    while changed:
        changed = False
        for op, _shared in matched[1:]:
            if op.dead or any(r.users or r.is_output for r in op.results):
                continue
            graph.remove_op(op)
            for r in op.results:
                graph.remove_value(r)
            changed = True
