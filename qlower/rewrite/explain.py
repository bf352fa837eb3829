"""`qlower explain`: how far each candidate rule gets on one node, and why it stops.

This walks a rule's pattern the slow, talkative way (the compiled matchers
record nothing, so lowering pays nothing for explanations).
"""

from __future__ import annotations

from typing import Any

from qlower.diagnostics import QlowerError, Span, did_you_mean, error
from qlower.graph.core import Graph, Op, Value
from qlower.graph.types import canonical_dtype
from qlower.lang import ast
from qlower.rewrite.compile import _bound_names
from qlower.rewrite.expr import compile_expr
from qlower.lang.functions import EvalError
from qlower.rewrite.match import _FAMILIES, _match_dims, _same_literal

_MISSING = object()


class _Stop(Exception):
    def __init__(self, message: str, span: Span | None) -> None:
        super().__init__(message)
        self.span = span


def _at(span: Span | None) -> str:
    return f" ({span})" if span is not None else ""


class _Tracer:
    def __init__(self, decls, functions) -> None:
        self.decls = decls
        self.functions = functions
        self.steps: list[str] = []

    def op(self, pat: ast.OpPattern, op: Op | None, env: dict, binders: tuple[str, ...] = ()) -> None:
        if op is None:
            raise _Stop(f"expected an op of type {' | '.join(pat.op_types)}, but the value has no producer "
                        f"(a graph input or constant)", pat.span)
        if op.type not in pat.op_types:
            raise _Stop(f"node {op.name} is {op.type}, not {' | '.join(pat.op_types)}", pat.span)
        self.steps.append(f"node {op.name} is {op.type}")
        for ap in pat.attrs:
            default = _MISSING
            decl = self.decls.get(op.type)
            for ad in (decl.attrs if decl else ()):
                if ad.name == ap.name and ad.default is not None:
                    default = compile_expr(ad.default, (), self.functions)({})
            got = op.attrs.get(ap.name, default)
            shown = "absent" if got is _MISSING else repr(got)
            if ap.kind == "literal" and not _same_literal(None if got is _MISSING else got, ap.value):
                raise _Stop(f"attribute {ap.name} of {op.name} is {shown}, the pattern wants {ap.value!r}", ap.span)
            if ap.kind == "capture":
                env[ap.value] = None if got is _MISSING else got
                self.steps.append(f"{ap.name} = {shown} (bound to {ap.value})")
        for name, r in zip(binders, op.results):
            if name != "_":
                env[name] = r
        operands = list(op.operands)
        while operands and operands[-1] is None:
            operands.pop()
        fixed = [p for p in pat.operands if not isinstance(p, ast.RestCapture)]
        rest = next((p for p in pat.operands if isinstance(p, ast.RestCapture)), None)
        least = len(fixed)  # trailing `b?` (and untyped `_`) may stand for absent operands
        while least and (isinstance(fixed[least - 1], ast.Capture) and fixed[least - 1].optional
                         or isinstance(fixed[least - 1], ast.Wildcard) and fixed[least - 1].type is None):
            least -= 1
        if rest is None and not least <= len(operands) <= len(fixed):
            raise _Stop(f"{op.name} has {len(operands)} operands, the pattern {len(fixed)}", pat.span)
        if rest is not None and len(operands) < len(fixed):
            raise _Stop(f"{op.name} has {len(operands)} operands, the pattern needs at least {len(fixed)}", pat.span)
        orders = [operands]
        commutative = pat.commutative or any(self.decls.get(t) is not None and self.decls[t].commutative
                                             for t in pat.op_types)
        if commutative and len(fixed) == 2 and len(operands) == 2:
            orders.append([operands[1], operands[0]])
        last: _Stop | None = None
        for order in orders:
            trial = dict(env)
            try:
                for p, v in zip(fixed, order + [None] * (len(fixed) - len(order))):
                    self.operand(p, v, trial)
                if rest is not None:
                    trial[rest.name] = list(order[len(fixed):])
                env.update(trial)
                return
            except _Stop as exc:
                last = exc
                if len(orders) > 1:
                    self.steps.append(f"operand order {[v.name if v else None for v in order]} fails: {exc}")
        assert last is not None
        raise last

    def operand(self, p: Any, v: Value | None, env: dict) -> None:
        if isinstance(p, ast.Capture):
            if v is None and p.optional:
                env[p.name] = None
                self.steps.append(f"optional operand `{p.name}` is absent")
                return
            if v is None:
                raise _Stop(f"operand `{p.name}` is absent", p.span)
            if p.name in env and env[p.name] is not v:
                raise _Stop(f"`{p.name}` is already {env[p.name].name}, here it would be {v.name}", p.span)
            self.vtype(p.type, v, env, p.span)
            env[p.name] = v
        elif isinstance(p, ast.Wildcard):
            if p.type is not None:
                if v is None:
                    raise _Stop("the operand is absent", p.span)
                self.vtype(p.type, v, env, p.span)
        elif isinstance(p, ast.OpPattern):
            self.op(p, v.producer if v is not None else None, env)
        elif isinstance(p, ast.NamedNested):
            env[p.name] = v
            self.op(p.pattern, v.producer if v is not None else None, env)
        elif isinstance(p, ast.Alternatives):
            reasons = []
            for o in p.options:
                trial = dict(env)
                try:
                    self.operand(o, v, trial)
                    env.update(trial)
                    return
                except _Stop as exc:
                    reasons.append(str(exc))
            raise _Stop("no alternative matches: " + "; ".join(reasons), p.span)

    def vtype(self, vt: ast.ValueType | None, v: Value, env: dict, span) -> None:
        if vt is None:
            return
        if vt.const and v.data is None:
            raise _Stop(f"{v.name} must be a constant", vt.span or span)
        if vt.dtype is not None:
            allowed = _FAMILIES.get(vt.dtype, (canonical_dtype(vt.dtype) or vt.dtype,))
            if allowed is not None and v.dtype.name not in allowed:
                raise _Stop(f"{v.name} is {v.dtype.name}, the pattern wants {vt.dtype}", vt.span or span)
        if vt.shape is not None and _match_dims(vt.shape, v.shape, env) is None:
            raise _Stop(f"{v.name} has shape {list(v.shape) if v.shape else '?'}, which does not fit the pattern",
                        vt.span or span)


def explain_rule(rule: ast.Rule, engine: Any, op: Op, backend: str | None) -> str:
    head = f"rule {rule.name} ({rule.span})"
    compiled = next((r for r in engine.all_rules if r.name == rule.name), None)
    if compiled is not None and not compiled.allowed_on(backend):
        return f"{head}: not used on {backend}: it is for {', '.join(sorted(compiled.backends or ()))}"
    from qlower.rewrite.compile import FAIL, GuardError
    from qlower.rewrite.emit import EmitFailure

    real = None
    if compiled is not None:
        try:
            real = compiled.match(op)
        except GuardError as exc:
            return f"{head}: a guard or let fails to evaluate: {exc}{_at(exc.span)}"
    if real is not None:  # the real matcher (with full backtracking) decides; explain only what it found
        if FAIL in real:
            return f"{head}: matches and reports an error: {real[FAIL][0]}"
        try:
            plan = engine.programs[rule.name].plan(real, op, backend)
        except EmitFailure as exc:
            return f"{head}: matches, but cannot emit: {exc}{_at(exc.span)}"
        ops = ", ".join(o.type for o in plan.ops) or "no ops (an alias)"
        return f"{head}: matches; would emit {ops}"
    # no match: walk the pattern the talkative way to say where the first attempt stops
    t = _Tracer(engine_decls(engine), engine.functions)
    env: dict = {}
    matches = rule.matches
    try:
        t.op(matches[0].pattern, op, env, matches[0].binders.names)
        for m in matches[1:]:
            v = env.get(m.binders.names[0]) if m.binders.names else None
            t.op(m.pattern, v.producer if isinstance(v, Value) else None, env, m.binders.names)
        bound = _bound_names(rule)
        for s in rule.body:
            if isinstance(s, ast.Require):
                ok = compile_expr(s.expr, bound, engine.functions)(env)
                t.steps.append(f"require at {s.span}: {ok}")
                if ok is not True:
                    raise _Stop("the guard is false", s.span)
            elif isinstance(s, ast.Let):
                env[s.name] = compile_expr(s.expr, bound, engine.functions)(env)
    except _Stop as exc:
        trace = "".join(f"\n    ok: {s}" for s in t.steps)
        return f"{head}: no match{trace}\n    stops: {exc}{_at(exc.span)}"
    except EvalError as exc:
        return f"{head}: a guard or let fails to evaluate: {exc}"
    return f"{head}: the pattern and guards hold, but interior values are used outside the pattern " \
           f"(mark the pattern `shared` to allow that)"


def engine_decls(engine: Any):
    return engine.decls


def explain(graph: Graph, rules: Any, node: str, *, rule: str | None = None, backend: str | None = None) -> str:
    if not graph.has_op(node):
        names = [o.name for o in graph.ops]
        raise QlowerError(error(f"no node named {node}", hint=did_you_mean(node, names), code="unknown-node"))
    op = graph.op(node)
    engine = rules.engine(backend)
    candidates = [r for r in rules.ruleset.rules if op.type in r.matches[0].pattern.op_types]
    if rule is not None:
        chosen = rules.ruleset.rule(rule)
        if chosen is None:
            raise QlowerError(error(f"no rule named {rule}", hint=did_you_mean(rule, [r.name for r in
                                                                                  rules.ruleset.rules]),
                                    code="unknown-rule"))
        candidates = [chosen]
    lines = [f"node {op.name} ({op.type}); {len(candidates)} candidate rule(s)"
             + (f" for {backend}" if backend else "")]
    if not candidates:
        roots = sorted({t for r in rules.ruleset.rules for t in r.matches[0].pattern.op_types})
        hint = did_you_mean(op.type, roots)
        lines.append(f"  no rule is rooted at {op.type}" + (f"; {hint}" if hint else ""))
    order = {r.name: (-c.benefit, c.order) for c in engine.all_rules for r in [c.rule]}
    for r in sorted(candidates, key=lambda r: order.get(r.name, (0, 0))):
        lines.append("  " + explain_rule(r, engine, op, backend))
    return "\n".join(lines)
