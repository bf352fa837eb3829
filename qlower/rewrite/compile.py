"""Rules compiled once into matchers and emission programs, indexed by root op type."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from qlower.diagnostics import Span
from qlower.graph.core import Op
from qlower.lang import ast
from qlower.rewrite.expr import compile_expr, truth
from qlower.lang.functions import EvalError, FunctionTable
from qlower.rewrite.match import LISTEN, OPS, ControlKey, MatchTrace, PatternCompiler, producer_filter, simple_root

Env = dict[Any, Any]
FAIL = ControlKey("fail")  # set when a rule's `fail` step ran: (message, span)


class GuardError(Exception):
    """A guard, let or fail message raised while a rule was being tried."""

    def __init__(self, message: str, span: Span | None) -> None:
        super().__init__(message)
        self.span = span


@attrs.frozen
class CompiledRule:
    name: str
    rule: ast.Rule
    order: int
    benefit: int
    backends: frozenset[str] | None
    root_types: tuple[str, ...]
    # "lowering": source op → target ops, applied once per matched op; "source": source → source, to a
    # fixpoint before lowering; "cleanup": target → target (e.g. transposes that cancel), to a fixpoint after.
    kind: str
    # match(op) -> bindings or None; match(op, trace) also tells `trace` (a MatchTrace) why it fails
    match: Callable[..., Env | None] = attrs.field(repr=False)
    location: str = attrs.field(default=attrs.Factory(
        lambda self: str(self.rule.span) if self.rule.span else "<unknown>", takes_self=True))
    program: Any = attrs.field(default=None, repr=False, eq=False)  # its EmitProgram, set by the engine
    target: str = "qnn"  # the engine's target dialect: emitted `qnn.*` ops are checked against its registry
    straight: bool = False  # `match` is the straight-line one-op matcher (`simple_root`)
    # a quick necessary condition `match` checks first (`producer_filter`): false, and it does not match
    quick: Callable[[Op], bool] | None = attrs.field(default=None, repr=False, eq=False)

    @property
    def lowering(self) -> bool:
        return self.kind == "lowering"

    def allowed_on(self, backend: str | None) -> bool:
        return backend is None or self.backends is None or backend in self.backends


def bound_names(rule: ast.Rule) -> set[str]:
    """Every name a rule can bind (captures, dims, attrs, results, lets, emitted values)."""
    names: set[str] = set()

    def operand(p):
        if isinstance(p, ast.Capture):
            names.add(p.name)
            vtype(p.type)
        elif isinstance(p, ast.Wildcard):
            vtype(p.type)
        elif isinstance(p, ast.RestCapture):
            names.add(p.name)
        elif isinstance(p, ast.OpPattern):
            oppat(p)
        elif isinstance(p, ast.NamedNested):
            names.add(p.name)
            oppat(p.pattern)
        elif isinstance(p, ast.Alternatives):
            for o in p.options:
                operand(o)

    def vtype(t):
        if t is not None and t.shape:
            names.update(d.value for d in t.shape if d.kind == "capture")

    def oppat(p: ast.OpPattern):
        for a in p.attrs:
            if a.kind == "capture":
                names.add(a.value)
        for o in p.operands:
            operand(o)

    for s in rule.body:
        if isinstance(s, ast.Match):
            names.update(n for n in s.binders.names if n != "_")
            oppat(s.pattern)
        elif isinstance(s, ast.Let):
            names.add(s.name)
        elif isinstance(s, ast.Emit):
            for item in ast.flat_items(s.items):
                if isinstance(item, ast.EmitLet):
                    names.add(item.name)
                else:
                    names.update(item.binders.names)
    return names


_bound_names = bound_names  # the name the driver imports


def _ops_matched(p: Any) -> int:
    """How many ops a pattern matches (the default benefit); an alternative counts its largest option."""
    if isinstance(p, ast.OpPattern):
        return 1 + sum(_ops_matched(o) for o in p.operands)
    if isinstance(p, ast.NamedNested):
        return _ops_matched(p.pattern)
    if isinstance(p, ast.Alternatives):
        return max((_ops_matched(o) for o in p.options), default=0)
    return 0


def _steps(rule: ast.Rule, bound: set[str], functions: FunctionTable) -> list[tuple[str, Any, Span | None]]:
    """Guards, lets and the fail message, compiled, in the order the rule states them."""
    steps: list[tuple[str, Any, Span | None]] = []
    for s in rule.body:
        if isinstance(s, ast.Require):
            steps.append(("require", compile_expr(s.expr, bound, functions), s.span))
        elif isinstance(s, ast.Let):
            steps.append(("let", (s.name, compile_expr(s.expr, bound, functions)), s.span))
        elif isinstance(s, ast.Fail):
            steps.append(("fail", compile_expr(s.message, bound, functions), s.span))
            break
    return steps


def _finish(steps, env: Env) -> Env | None:
    """Run guards and lets on a matched environment; None when a guard is false."""
    added: list[str] = []
    span = None
    try:
        for kind, payload, span in steps:
            if kind == "require":
                if not truth(payload(env), "require"):
                    for a in added:
                        del env[a]
                    if LISTEN in env:
                        env[LISTEN].failed("the guard is false", span, env, "guard")
                    return None
            elif kind == "let":
                name, fn = payload
                env[name] = fn(env)
                added.append(name)
            else:
                env[FAIL] = (str(payload(env)), span)
                return env
    except EvalError as exc:
        raise GuardError(str(exc), span) from None
    return env


def compile_rule(rule: ast.Rule, order: int, decls: Mapping[str, ast.OpDecl],
                 functions: FunctionTable, target: str = "qnn", *, fast: bool = True) -> CompiledRule:
    """Compile one rule; `fast=False` keeps the general matcher even where a straight-line one exists,
    and without its quick producer check (the differential tests compare the two)."""
    matches = rule.matches
    if not matches:
        raise ValueError(f"rule {rule.name} has no match statement")
    pc = PatternCompiler(decls, functions)
    bound = _bound_names(rule)
    root = matches[0]
    steps = _steps(rule, bound, functions)

    def finish(env: Env):
        return _finish(steps, env)

    straight = simple_root(pc, root.pattern, root.binders.names, root.binders.rest, finish if steps else None) \
        if fast and len(matches) == 1 else None
    root_body = None if straight is not None else pc.op_body(root.pattern, root.binders.names, root.binders.rest)
    dag = []
    for m in matches[1:]:
        first = m.binders.names[0] if m.binders.names else None
        dag.append((first, pc.nested(m.pattern, m.binders.names, m.binders.rest)))

    def one_use(env: Env) -> bool:
        ops = env[OPS]
        if len(ops) == 1:
            return True
        inside = {id(o) for o, _ in ops}
        for op, shared in ops[1:]:
            if shared:
                continue
            for r in op.results:
                if r.is_output:
                    if LISTEN in env:
                        _used_outside(env, op, r, "a graph output", root.span)
                    return False
                for user, _ in r.users:
                    if id(user) not in inside:
                        if LISTEN in env:
                            _used_outside(env, op, r, f"node {user.name}", root.span)
                        return False
        return True

    def after_root(env: Env, i: int = 0):
        if i < len(dag):
            name, nested = dag[i]
            return nested(env.get(name), env, lambda e: after_root(e, i + 1))
        if not one_use(env):
            return None
        return finish(env)

    quick = producer_filter(pc, root.pattern) if fast and straight is None else None
    if straight is not None:
        match = straight
    else:
        def match(op: Op, listener: MatchTrace | None = None) -> Env | None:
            if listener is None:
                if quick is not None and not quick(op):
                    return None
                return root_body(op, {OPS: []}, after_root)
            env = root_body(op, {OPS: [], LISTEN: listener}, after_root)
            if env is not None:
                env.pop(LISTEN, None)
            return env

    benefit = rule.benefit if rule.benefit is not None else sum(_ops_matched(m.pattern) for m in matches)
    return CompiledRule(rule.name, rule, order, benefit,
                        frozenset(rule.backends) if rule.backends is not None else None,
                        tuple(root.pattern.op_types), rule_kind(rule, target), match, target=target,
                        straight=straight is not None, quick=quick)


def _used_outside(env: Env, op: Op, r: Any, user: str, span: Span | None) -> None:
    env[LISTEN].failed(f"{r.name}, the result of the interior node {op.name}, is used outside the pattern by {user} "
                       f"(mark the pattern `shared` to allow that)", span, env, "uses")


def rule_kind(rule: ast.Rule, target: str = "qnn") -> str:
    """`lowering`, `source` or `cleanup` (see CompiledRule.kind); `target` is the target dialect."""
    prefix = target + "."
    roots = rule.matches[0].pattern.op_types if rule.matches else ()
    if roots and all(t.startswith(prefix) for t in roots):
        return "cleanup"
    # an op type known per match (`k: op` given an expression) must be a target op in a lowering rule
    emitted = [i for i in rule.emits if isinstance(i, ast.EmitOp) and i.op_expr is None]
    return "lowering" if all(i.op.startswith(prefix) for i in emitted) else "source"


@attrs.frozen
class RuleIndex:
    """Candidate rules per root op type, best first (benefit, then file order)."""

    by_type: Mapping[str, tuple[CompiledRule, ...]]
    rules: tuple[CompiledRule, ...]

    def candidates(self, op_type: str) -> tuple[CompiledRule, ...]:
        return self.by_type.get(op_type, ())

    @classmethod
    def build(cls, rules: Iterable[CompiledRule], backend: str | None = None) -> RuleIndex:
        by: dict[str, list[CompiledRule]] = {}
        kept = [r for r in rules if r.allowed_on(backend)]
        for r in kept:
            for t in r.root_types:
                by.setdefault(t, []).append(r)
        ordered = {t: tuple(sorted(rs, key=lambda r: (-r.benefit, r.order))) for t, rs in by.items()}
        return cls(ordered, tuple(kept))
