"""The rewrite driver: source→source rules to a bounded fixpoint, lowering, then target cleanup.

Lowering rules (source → qnn) are tried once per source op, consumers before
producers (reverse execution order) so multi-op patterns see their producers
still unlowered; the best candidate by benefit that matches and emits wins.
Source→source rules run on a worklist with a budget before lowering, and
cleanup rules (rooted at target ops: transposes that cancel, reshape chains)
the same way after it; a set that does not converge stops with an error naming
the rules that kept firing.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from qlower.diagnostics import Diagnostic, Note, did_you_mean, error
from qlower.graph.core import Graph, GraphError, Op, Provenance
from qlower.lang import ast
from qlower.rewrite.compile import FAIL, CompiledRule, GuardError, RuleIndex, _bound_names, compile_rule
from qlower.rewrite.emit import EmitFailure, EmitProgram, commit
from qlower.lang.functions import FunctionTable
from qlower.lang.builtins import builtin_functions
from qlower.lang.backend import for_backend


@attrs.define
class Coverage:
    """Per source op type: how many there were, which rules lowered them, what they became."""

    count: int = 0
    rules: dict[str, int] = attrs.Factory(dict)
    emitted: dict[str, int] = attrs.Factory(dict)
    unlowered: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "rules": dict(sorted(self.rules.items())),
                "qnn_ops": dict(sorted(self.emitted.items())), "unlowered": self.unlowered}


@attrs.define
class RuleStats:
    tries: int = 0
    matches: int = 0
    applied: int = 0


@attrs.define
class Outcome:
    graph: Graph
    diagnostics: list[Diagnostic]
    coverage: dict[str, Coverage]
    stats: dict[str, RuleStats]

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)


def stored_enum_literals(rule: ast.Rule, opdefs: Any, target: str) -> ast.Rule:
    """The rule with each enum literal in a target-op attribute pattern (`{ operation: "HARD_SIGMOID" }`)
    replaced by the value lowering stores for it (emit writes enum params as their index), so
    a cleanup rule matches the ops lowering made. The checker has already rejected unknown names."""
    prefix = target + "."

    def pattern(p: ast.OpPattern) -> ast.OpPattern:
        attrs_ = p.attrs
        if any(a.kind == "literal" and isinstance(a.value, str) for a in attrs_) and len(p.op_types) == 1 \
                and p.op_types[0].startswith(prefix):
            name = p.op_types[0][len(prefix):]
            new = []
            for a in attrs_:
                pdef = opdefs.param(name, a.name) if a.kind == "literal" and isinstance(a.value, str) else None
                if pdef is not None and pdef.enum:
                    names = [e.upper() for e in pdef.enum]
                    if a.value.upper() in names:
                        a = attrs.evolve(a, value=names.index(a.value.upper()))
                new.append(a)
            attrs_ = tuple(new)
        operands = tuple(operand(o) for o in p.operands)
        if attrs_ is p.attrs and all(x is y for x, y in zip(operands, p.operands)):
            return p
        return attrs.evolve(p, attrs=attrs_, operands=operands)

    def operand(o: Any) -> Any:
        if isinstance(o, ast.OpPattern):
            return pattern(o)
        if isinstance(o, ast.NamedNested):
            q = pattern(o.pattern)
            return o if q is o.pattern else attrs.evolve(o, pattern=q)
        if isinstance(o, ast.Alternatives):
            opts = tuple(operand(x) for x in o.options)
            return o if all(x is y for x, y in zip(opts, o.options)) else attrs.evolve(o, options=opts)
        return o

    body = []
    changed = False
    for stmt in rule.body:
        if isinstance(stmt, ast.Match):
            q = pattern(stmt.pattern)
            if q is not stmt.pattern:
                stmt, changed = attrs.evolve(stmt, pattern=q), True
        body.append(stmt)
    return attrs.evolve(rule, body=tuple(body)) if changed else rule


def pure_retype(rule: ast.Rule) -> tuple[str, int, int] | None:
    """(target op type, #operands, #results) when `rule` only changes an op's type: one op pattern of
    plain captures (no types, attributes, guards or lets) and one emitted op of a literal type taking
    those captures in order and giving the matched results (what `map A(x, y) -> B(x, y)` writes).
    Such rules are the commonest in packs; the engine applies them without the general matcher and
    planner, with the same outcome (a law in tests/rewrite checks that)."""
    if len(rule.body) != 2:
        return None
    m, e = rule.body
    if not isinstance(m, ast.Match) or not isinstance(e, ast.Emit) or len(e.items) != 1:
        return None
    pat, item = m.pattern, e.items[0]
    if not isinstance(item, ast.EmitOp) or pat.attrs or pat.commutative or pat.shared or m.binders.rest:
        return None
    caps = pat.operands
    if not all(type(c) is ast.Capture and c.type is None and not c.optional for c in caps):
        return None
    names = [c.name for c in caps]
    if len(set(names)) != len(names) or set(names) & set(m.binders.names) or "_" in m.binders.names:
        return None
    if item.params or item.props or item.fold or item.default or item.op_expr is not None \
            or item.binders.rest or tuple(item.binders.names) != tuple(m.binders.names):
        return None
    if len(item.args) != len(caps) or any(a.kind != "value" or a.expr is not None or a.name != n
                                          for a, n in zip(item.args, names)):
        return None
    return item.op, len(caps), len(m.binders.names)


def _count(out: Outcome, root_type: str, rule: str, new_ops: Iterable[Op]) -> None:
    """Coverage of one application: the rule, and the ops it left, under the source op type."""
    c = out.coverage.get(root_type)
    if c is not None:
        c.rules[rule] = c.rules.get(rule, 0) + 1
        for n in new_ops:
            c.emitted[n.type] = c.emitted.get(n.type, 0) + 1


def _subject(op: Op) -> str:
    return f"node {op.name} ({op.type})"


class Engine:
    """A rule set compiled for one backend; reusable across graphs."""

    def __init__(self, rules: Iterable[ast.Rule], decls: Mapping[str, ast.OpDecl], *, registry: Any,
                 backend: str | None, functions: FunctionTable | None = None, target: str = "qnn",
                 fast_retypes: bool = True) -> None:
        self.functions = functions or builtin_functions()
        self.decls = decls
        self.backend = backend
        self.registry = registry
        self.target = target
        self._prefix = target + "."
        compiled: list[CompiledRule] = []
        self.programs: dict[str, EmitProgram] = {}
        opdefs = getattr(registry, "opdefs", None)
        for i, rule in enumerate(rules):
            if opdefs is not None:
                rule = stored_enum_literals(rule, opdefs, target)
            rule = for_backend(rule, backend)  # `backend()` is this engine's constant
            c = compile_rule(rule, i, decls, self.functions, target)
            program = EmitProgram(c, registry, self.functions, _bound_names(rule))
            object.__setattr__(c, "program", program)  # rule and its emission travel together
            compiled.append(c)
            self.programs[c.name] = program
        self.all_rules = tuple(compiled)
        # rules that only retype an op, applied on a short path (see `pure_retype`)
        self.retypes: dict[str, tuple[str, int, int]] = {}
        if fast_retypes:
            self.retypes = {c.name: spec for c in compiled if (spec := pure_retype(c.rule)) is not None}
        self.lowering = RuleIndex.build([c for c in compiled if c.kind == "lowering"], backend)
        self.source = RuleIndex.build([c for c in compiled if c.kind == "source"], backend)
        self.cleanup = RuleIndex.build([c for c in compiled if c.kind == "cleanup"], backend)

    # ------------------------------------------------------------------ run
    def run(self, graph: Graph, *, budget_factor: int = 8) -> Outcome:
        out = Outcome(graph, [], {}, {r.name: RuleStats() for r in self.all_rules})
        reasons: dict[int, list[str]] = collections.defaultdict(list)
        if self.source.rules:
            self._fixpoint(graph, self.source, "source rewrites", out, reasons, budget_factor)
        try:
            order = graph.topo_order()
        except GraphError as exc:
            out.diagnostics.append(error(str(exc), code="cycle"))
            return out
        cov = out.coverage
        counts = collections.Counter(op.type for op in order)
        prefix = self._prefix
        for op_type, n in counts.items():
            if not op_type.startswith(prefix):
                cov[op_type] = Coverage(count=n)
        failed: set[int] = set()
        by_type = self.lowering.by_type
        apply = self._apply_first
        for op in reversed(order):
            if op.dead or op.type.startswith(prefix):  # lowering roots at source ops only
                continue
            cands = by_type.get(op.type)
            if cands:
                apply(graph, op, cands, out, reasons, failed)
        self._legality(graph, out, reasons, failed)
        if self.cleanup.rules:
            self._fixpoint(graph, self.cleanup, "cleanup rewrites", out, reasons, budget_factor)
        out.stats = dict(out.stats)
        return out

    def _apply_first(self, graph: Graph, op: Op, cands, out: Outcome, reasons,
                     failed) -> tuple[str, list[Op]] | None:
        """Apply the best candidate that matches and emits; None when none does."""
        stats = out.stats
        retypes = self.retypes
        for rule in cands:
            st = stats[rule.name]
            spec = retypes.get(rule.name)
            if spec is not None:
                done = self._retype(graph, op, rule, spec, st, out)
                if done is not None:
                    return done
            st.tries += 1
            try:
                env = rule.match(op)
            except GuardError as exc:
                out.diagnostics.append(error(f"rule {rule.name} failed while matching: {exc}",
                                             subject=_subject(op), span=exc.span, code="guard-error"))
                continue
            if env is None:
                continue
            st.matches += 1
            if FAIL in env:
                msg, span = env[FAIL]
                out.diagnostics.append(error(msg, subject=_subject(op), span=span, code="rule-fail",
                                             notes=[Note(f"reported by rule {rule.name}", rule.rule.span)]))
                failed.add(id(op))
                return None
            try:
                plan = rule.program.plan(env, op, self.backend)
            except EmitFailure as exc:
                if exc.soft:
                    reasons[id(op)].append((rule.name, str(exc)))
                else:
                    out.diagnostics.append(error(f"rule {rule.name} cannot emit: {exc}", subject=_subject(op),
                                                 span=exc.span or rule.rule.span, code="emit-error"))
                continue
            root_type = op.type
            new_ops = commit(graph, plan, env, rule)
            st.applied += 1
            _count(out, root_type, rule.name, new_ops)
            return rule.name, new_ops
        return None

    def _retype(self, graph: Graph, op: Op, rule: CompiledRule, spec: tuple[str, int, int], st: RuleStats,
                out: Outcome) -> tuple[str, list[Op]] | None:
        """Apply a pure-retype rule to `op` when it plainly matches and its op is supported here; None
        leaves every other case (no match, unsupported op, absent operands) to the general path."""
        new_type, n, nres = spec
        operands, results = op.operands, op.results
        if len(operands) != n or len(results) != nres or None in operands \
                or not rule.program.supported(new_type, self.backend):
            return None
        for r in results:
            if r in operands:  # a cycle: the general path reports it
                return None
        p = op.provenance
        sources = p.sources if p is not None and p.sources else (op.name,)
        if len(sources) > 1:
            sources = tuple(dict.fromkeys(sources))
        prov = Provenance(rule.name, rule.location, p.source if p else op.name, sources)
        root_type = op.type
        graph.retype(op, new_type, {}, prov)
        st.tries += 1
        st.matches += 1
        st.applied += 1
        _count(out, root_type, rule.name, (op,))
        return rule.name, [op]

    def _fixpoint(self, graph: Graph, index: RuleIndex, what: str, out: Outcome, reasons,
                  budget_factor: int) -> None:
        """Apply `index`'s rules wherever they match until none does (or the budget runs out)."""
        try:
            work = collections.deque(graph.topo_order())
        except GraphError as exc:
            out.diagnostics.append(error(str(exc), code="cycle"))
            return
        budget = budget_factor * max(len(work), 1) + 100
        recent: collections.deque[str] = collections.deque(maxlen=32)
        applied = 0
        queued = {id(o) for o in work}
        while work:
            op = work.popleft()
            queued.discard(id(op))
            if op.dead:
                continue
            cands = index.candidates(op.type)
            if not cands:
                continue
            done = self._apply_first(graph, op, cands, out, reasons, set())
            if done is None:
                continue
            name, new_ops = done
            applied += 1
            recent.append(name)
            if applied > budget:
                names = sorted(set(recent))
                by_name = {r.name: r for r in index.rules}
                out.diagnostics.append(error(
                    f"{what} did not converge after {applied} applications; rules still firing: "
                    f"{', '.join(names)}", code="no-fixpoint",
                    hint="two rules probably undo each other, or a rule re-matches its own output",
                    notes=[Note(f"rule {n} is here", by_name[n].rule.span) for n in names if n in by_name]))
                return
            # revisit what the rewrite touched: the new ops and the consumers of their results
            touched = list(new_ops)
            for n in new_ops:
                touched.extend(u for r in n.results for u, _ in r.users)
            for o in touched:
                if not o.dead and id(o) not in queued:
                    work.append(o)
                    queued.add(id(o))

    def _legality(self, graph: Graph, out: Outcome, reasons, failed) -> None:
        prefix = self._prefix
        for op in list(graph.ops):
            if op.type.startswith(prefix):
                continue
            c = out.coverage.get(op.type)
            if c is not None:
                c.unlowered += 1
            if id(op) in failed:
                continue
            cands = self.lowering.candidates(op.type)
            why = dict(reasons.get(id(op), []))
            notes = []
            if cands:
                for r in cands[:4]:
                    if r.name in why:
                        notes.append(Note(f"rule {r.name} matches, but {why[r.name]}", r.rule.span))
                    else:
                        notes.append(Note(f"rule {r.name} does not match (`qlower explain` shows why)", r.rule.span))
                if why and len(why) == len(cands):
                    msg = f"no rule can lower this op here: {'; '.join(sorted(set(why.values())))}"
                else:
                    msg = f"no rule lowers this op ({len(cands)} candidate rule(s) tried)"
                hint = None
            else:
                msg = "no rule lowers this op type"
                hint = did_you_mean(op.type, list(self.lowering.by_type))
                other = [r.name for r in self.all_rules if op.type in r.root_types]
                if other and not hint:
                    hint = f"rules {', '.join(other)} exist but not for backend {self.backend}"
            out.diagnostics.append(error(msg, subject=_subject(op), hint=hint, notes=notes, code="not-lowered"))
