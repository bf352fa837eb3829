"""`qlower explain`: how far each candidate rule gets on one node, and why it stops.

It runs the engine's own compiled matcher with a `MatchTrace` listening (as
MLIR's `notifyMatchFailure`): every reason the matcher gives up on an attempt
is reported there with its place in the rule file, and the attempt that got
furthest is shown. Lowering runs the same matcher with no listener.
"""

from __future__ import annotations

from typing import Any

from qlower.diagnostics import QlowerError, Span, did_you_mean, error
from qlower.graph.core import Graph, Op, Value
from qlower.lang import ast
from qlower.rewrite.compile import FAIL, GuardError
from qlower.rewrite.emit import EmitFailure
from qlower.rewrite.match import MatchFailure, MatchTrace


def _at(span: Span | None) -> str:
    return f" ({span})" if span is not None else ""


def _shown(v: Any) -> str:
    if isinstance(v, Value):
        shape = "?" if v.shape is None else list(v.shape)
        return f"{v.name} ({v.dtype.name} {shape})"
    if isinstance(v, list) and all(isinstance(x, Value) for x in v):
        return "[" + ", ".join(x.name for x in v) + "]"
    if v is None:
        return "none"
    return repr(v)


def _trace(f: MatchFailure, others: list[MatchFailure]) -> str:
    """The attempt that got furthest (what it matched and bound, where it stops), then the others."""
    lines = [f"ok: node {o.name} is {o.type}" for o in f.ops]
    lines += [f"ok: `{k}` = {_shown(v)}" for k, v in f.bindings.items()]
    lines.append(f"stops: {f.message}{_at(f.span)}")
    lines += [f"other attempt: {o.message}{_at(o.span)}" for o in others]
    return "".join(f"\n    {line}" for line in lines)


def explain_rule(rule: ast.Rule, engine: Any, op: Op, backend: str | None) -> str:
    """One line (and its trace) on what `rule` does with `op`."""
    head = f"rule {rule.name} ({rule.span})"
    compiled = next((r for r in engine.all_rules if r.name == rule.name), None)
    if compiled is None:
        return f"{head}: not compiled into this engine"
    if not compiled.allowed_on(backend):
        return f"{head}: not used on {backend}: it is for {', '.join(sorted(compiled.backends or ()))}"
    trace = MatchTrace()
    try:
        env = compiled.match(op, trace)
    except GuardError as exc:
        return f"{head}: a guard or let fails to evaluate: {exc}{_at(exc.span)}"
    if env is None:
        best = trace.best()
        if best is None:  # every matcher branch reports; this would be a matcher bug
            return f"{head}: no match (no reason was reported)"
        others = [f for f in trace.failures if f is not best]
        return f"{head}: no match{_trace(best, others)}"
    if FAIL in env:
        return f"{head}: matches and reports an error: {env[FAIL][0]}"
    try:
        plan = compiled.program.plan(env, op, backend)
    except EmitFailure as exc:
        return f"{head}: matches, but cannot emit: {exc}{_at(exc.span)}"
    ops = ", ".join(o.type for o in plan.ops) or "no ops (an alias)"
    return f"{head}: matches; would emit {ops}"


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
