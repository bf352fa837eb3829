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
from qlower.rewrite.memo import NO_KEY, Reads, emit_reads, key_function, match_reads, template_ok
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
    """One rule's work in a run: ops it was tried on, how many matched, how many it rewrote."""

    tries: int = 0
    matches: int = 0
    applied: int = 0

    def to_json(self) -> dict[str, int]:
        return {"tries": self.tries, "matches": self.matches, "applied": self.applied}


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


def _provenance(p: Provenance, name: str, rule: str, location: str) -> Provenance:
    """The provenance of an op an earlier rule made, retyped in place by `rule`: it keeps standing for
    the input-graph nodes it came from (as `commit` records them)."""
    sources = p.sources if p.sources else (name,)
    if len(sources) > 1:
        sources = tuple(dict.fromkeys(sources))
    return Provenance(rule, location, p.source, sources)


def _template_reads(rule: CompiledRule, functions: FunctionTable) -> Reads | None:
    """`emit_reads` of a lowering rule whose match is the straight-line one and whose emission is one
    target op in place of the root (same results in order) with scalar params; None for any other."""
    program = rule.program
    if not rule.straight or program._simple is None or not program._results_in_order \
            or not program._simple[0].op.startswith(program.prefix):
        return None
    if any(pdef is not None and not pdef.is_scalar for _, _, pdef, _ in program._simple[2]):
        return None  # a tensor param: each op gets its own array, which a memo would share
    return emit_reads(rule.rule, functions)


# what lowering does with the ops of one type
_TARGET, _GENERAL, _RETYPE, _MEMO = "target", "general", "retype", "memo"


class _Kind:
    """The ops of one source type met while lowering: what to do with them, decided at the first,
    and how many there were and how many went the general way (`slow`; `skips`: how many of
    those after how many leading candidates the memo found not to match).

    `_RETYPE`: the best candidate is a pure retype. `_MEMO`: the leading candidates up to `rule`
    (the first that can retype an op from a memo, if any) decide whether they match by `key`
    alone; per key the memo holds the params `rule` retypes with, or how many candidates to skip.
    """

    __slots__ = ("mode", "n", "slow", "skips", "first", "cov", "cands", "suffixes", "prefix", "at",
                 "rule", "rule_name", "location", "new_type", "nops", "nres", "key", "memo")

    def __init__(self) -> None:
        self.mode = _GENERAL
        self.n = self.slow = 0
        self.skips: dict[int, int] = {}
        self.first: Op | None = None
        self.cov: Coverage | None = None
        self.cands: tuple[CompiledRule, ...] = ()
        self.suffixes: list[tuple[CompiledRule, ...]] = []  # cands[s:] for each s
        self.prefix: tuple[CompiledRule, ...] = ()
        self.at = 0  # the index of `rule` among the candidates
        self.rule: CompiledRule | None = None
        self.rule_name = self.location = self.new_type = ""
        self.nops = self.nres = 0
        self.key: Any = None
        self.memo: dict[Any, Any] = {}


class _Tries:
    """The candidates of one op type in a fixpoint, tried in order: `steps` are the leading ones whose
    no-match is known without the matcher, each an index into the memo's flags (the candidate's
    match decided by `key`) or a quick check; `counts[s]`: ops turned away by the first s."""

    __slots__ = ("steps", "key", "memo", "nops", "nres", "decided", "counts", "suffixes")

    def __init__(self, cands: tuple[CompiledRule, ...], decidable: Mapping[str, Reads]) -> None:
        steps: list[Any] = []
        decided: list[CompiledRule] = []
        reads: list[Reads] = []
        for r in cands:
            got = decidable.get(r.name)
            if got is not None:
                steps.append(len(decided))
                decided.append(r)
                reads.append(got)
            elif r.quick is not None:
                steps.append(r.quick)
            else:
                break
        self.steps = tuple(steps)
        self.decided = tuple(decided)
        self.key = None
        self.nops = self.nres = 0
        if decided:
            root = decided[0].rule.matches[0]
            self.nops, self.nres = len(root.pattern.operands), len(root.binders.names)
            self.key = key_function(reads, self.nops)
        self.memo: dict[Any, tuple[bool, ...]] = {}
        self.counts = [0] * (len(cands) + 1)
        self.suffixes = [cands[i:] for i in range(len(cands) + 1)]


@attrs.frozen
class RewriteConfig:
    """How long a rewrite phase may run before qlower calls it divergent.

    A phase may apply rules `budget_factor` times per op plus `slack`, where the ops
    counted are the most the graph has held during the phase — so the ops rules
    create count too, and a rule that unrolls a loop one step per application
    (patterns/onnx/rnn.qpat) converges however long the sequence. Rules that undo
    each other keep the graph's size and run out of applications; a rule that keeps
    expanding its own output grows the graph past `growth_factor` × its starting
    size + `growth_slack` ops and is stopped there.
    """

    budget_factor: int = 8
    slack: int = 100
    growth_factor: int = 64
    growth_slack: int = 100_000


class Budget:
    """One phase's budget under a `RewriteConfig` (the fixpoint and its reference share it)."""

    __slots__ = ("config", "peak", "limit", "cap", "start")

    def __init__(self, config: RewriteConfig, ops: int) -> None:
        self.config = config
        self.start = self.peak = max(ops, 1)
        self.limit = config.budget_factor * self.peak + config.slack
        self.cap = config.growth_factor * self.start + config.growth_slack

    def exhausted(self, applied: int, live_ops: int) -> bool:
        """After `applied` applications with `live_ops` ops in the graph: stop now?"""
        if live_ops > self.peak:
            self.peak = live_ops
            self.limit = self.config.budget_factor * live_ops + self.config.slack
        return applied > self.limit or live_ops > self.cap

    def error(self, what: str, applied: int, recent: Iterable[str], rules: Iterable[Any]) -> Diagnostic:
        return no_fixpoint(what, applied, recent, rules, grew=(self.start, self.peak) if self.peak > self.cap else None)


def no_fixpoint(what: str, applied: int, recent: Iterable[str], rules: Iterable[Any],
                grew: tuple[int, int] | None = None) -> Diagnostic:
    """The error of a rewrite phase that kept firing past its budget, naming the rules that fired last
    (`rules`: the phase's compiled rules, for where each is written; `grew`: the graph's op count at
    the start and at the stop, when it was growth that stopped the phase)."""
    names = sorted(set(recent))
    by_name = {r.name: r for r in rules}
    if grew is not None:
        message = (f"{what} did not converge: the graph grew from {grew[0]} to {grew[1]} ops in {applied} "
                   f"applications; rules still firing: {', '.join(names)}")
        hint = "a rule keeps expanding its own output (its result matches it again, larger)"
    else:
        message = f"{what} did not converge after {applied} applications; rules still firing: {', '.join(names)}"
        hint = "two rules probably undo each other, or a rule re-matches its own output"
    return error(message, code="no-fixpoint", hint=hint,
                 notes=[Note(f"rule {n} is here", by_name[n].rule.span) for n in names if n in by_name])


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
        # short paths (fast_retypes=False: none, every op goes the general way; the laws compare the two):
        # rules that only retype an op (see `pure_retype`); one-op rules whose match (`decidable`), and
        # for some lowering rules the params of the op they retype to (`templates`), are decided once
        # per key of what they read (see qlower.rewrite.memo)
        self.retypes: dict[str, tuple[str, int, int]] = {}
        self.decidable: dict[str, Reads] = {}
        self.templates: dict[str, Reads] = {}
        if fast_retypes:
            self.retypes = {c.name: spec for c in compiled if (spec := pure_retype(c.rule)) is not None}
            self.decidable = {c.name: got for c in compiled
                              if c.straight and (got := match_reads(c.rule, self.functions)) is not None}
            self.templates = {c.name: got for c in compiled if c.kind == "lowering" and c.name in self.decidable
                              and (got := _template_reads(c, self.functions)) is not None}
        self.lowering = RuleIndex.build([c for c in compiled if c.kind == "lowering"], backend)
        self.source = RuleIndex.build([c for c in compiled if c.kind == "source"], backend)
        self.cleanup = RuleIndex.build([c for c in compiled if c.kind == "cleanup"], backend)

    # ------------------------------------------------------------------ run
    def run(self, graph: Graph, *, config: RewriteConfig = RewriteConfig()) -> Outcome:
        out = Outcome(graph, [], {}, {r.name: RuleStats() for r in self.all_rules})
        reasons: dict[int, list[str]] = collections.defaultdict(list)
        if self.source.rules:
            self._fixpoint(graph, self.source, "source rewrites", out, reasons, config)
        try:
            order = graph.topo_order()
        except GraphError as exc:
            out.diagnostics.append(error(str(exc), code="cycle"))
            return out
        failed: set[int] = set()
        left, rewired = self._lower(graph, order, out, reasons, failed)
        if left:
            self._legality(graph, out, reasons, failed)
        if self.cleanup.rules:  # (ops only retyped in place: the graph's execution order is still `order`)
            self._fixpoint(graph, self.cleanup, "cleanup rewrites", out, reasons, config,
                           None if rewired else order)
        out.stats = dict(out.stats)
        return out

    def _lower(self, graph: Graph, order: list[Op], out: Outcome, reasons, failed) -> tuple[int, bool]:
        """Lower every source op, consumers first; returns how many no rule lowered, and whether a
        rewrite changed the graph's ops or edges (rather than only retyping ops in place).

        What to do with an op is decided once per op type (`_Kind`): its best candidate may
        be a pure retype or a memoised one-op rule, applied here in place as the general
        path would (same type, params, provenance); any op that does not plainly fit goes
        the general way. The ops applied here are counted per type at the end (stats,
        coverage), not one by one.
        """
        kinds: dict[str, _Kind] = {}
        new_kind = self._kind
        apply = self._apply_first
        new = tuple.__new__
        left = 0
        pristine = True  # only ops retyped in place so far: edges as topo_order found them
        for op in reversed(order):
            t = op.type
            k = kinds.get(t)
            if k is None:
                k = kinds[t] = new_kind(t, out)
            mode = k.mode
            if mode is _TARGET:  # lowering roots at source ops only
                continue
            k.n += 1
            k.first = op
            if op.dead:
                k.slow += 1
                continue
            cands = k.cands
            if mode is not _GENERAL:
                ops, res = op.operands, op.results
                # (no op reads its own result while the graph is as topo_order found it: acyclic)
                if len(ops) == k.nops and len(res) == k.nres and None not in ops and (
                        pristine or not any(r in ops for r in res)):
                    if mode is _RETYPE:
                        attrs_ = {}
                    else:
                        key = k.key(op)
                        try:
                            e = k.memo[key]
                        except KeyError:
                            e = k.memo[key] = self._decide(k, op) if key is not NO_KEY else 0
                        except TypeError:  # an unhashable key (a shape held as a list)
                            e = 0
                        if e.__class__ is dict:
                            attrs_ = e.copy()
                        else:  # the general way, past the leading candidates that do not match
                            attrs_ = None
                            if e:
                                k.skips[e] = k.skips.get(e, 0) + 1
                                cands = k.suffixes[e]
                    if attrs_ is not None:
                        name = op.name
                        p = op.provenance
                        op.type = k.new_type
                        op.attrs = attrs_
                        op.provenance = new(Provenance, (k.rule_name, k.location, name, (name,))) if p is None \
                            else _provenance(p, name, k.rule_name, k.location)
                        continue
            k.slow += 1
            self._keep_order(k)
            done = apply(graph, op, cands, out, reasons, failed) if cands else None
            if done is None:
                left += 1
            elif pristine and (len(done[1]) != 1 or done[1][0] is not op):
                pristine = False  # the general path rewired the graph
        self._count_kinds(kinds, order, out)
        return left, not pristine

    def _kind(self, op_type: str, out: Outcome) -> _Kind:
        k = _Kind()
        if op_type.startswith(self._prefix):
            k.mode = _TARGET
            return k
        k.cov = out.coverage[op_type] = Coverage()
        cands = k.cands = self.lowering.by_type.get(op_type, ())
        k.suffixes = [cands[i:] for i in range(len(cands) + 1)]
        if not cands:
            return k
        spec = self.retypes.get(cands[0].name)
        if spec is not None and cands[0].program.supported(spec[0], self.backend):
            k.mode = _RETYPE
            k.rule = cands[0]
            k.new_type, k.nops, k.nres = spec
        else:
            prefix, reads = [], []
            for r in cands:
                got = self.decidable.get(r.name)
                if got is None:
                    break
                prefix.append(r)
                template = self.templates.get(r.name)
                if template is not None and r.program.supported(r.program._simple[0].op, self.backend):
                    reads.append(template)
                    k.rule, k.at = r, len(prefix) - 1
                    k.new_type = r.program._simple[0].op
                    break
                reads.append(got)
            if not prefix:
                return k
            k.mode = _MEMO
            k.prefix = tuple(prefix)
            root = cands[0].rule.matches[0]
            k.nops, k.nres = len(root.pattern.operands), len(root.binders.names)
            k.key, k.memo = key_function(reads, k.nops), {}
        if k.rule is not None:
            k.rule_name, k.location = k.rule.name, k.rule.location
        return k

    def _decide(self, k: _Kind, op: Op) -> Any:
        """What the general path does with `op`, as a memo entry: the params of the op `k.rule`
        retypes it to in place, or how many leading candidates do not match it (the general path
        takes it from there: a fail, an error, an emission other than a plain retype, the others)."""
        for j, rule in enumerate(k.prefix):
            try:
                env = rule.match(op)
            except GuardError:
                return j
            if env is None:
                continue
            if FAIL in env or rule is not k.rule:
                return j
            try:
                plan = rule.program.plan(env, op, self.backend)
            except EmitFailure:
                return j
            new = plan.ops[0]
            if not plan.retype or len(new.args) != len(op.operands) \
                    or any(a is not b for a, b in zip(new.args, op.operands)) or not template_ok(new.attrs):
                return j
            return new.attrs
        return len(k.prefix)

    @staticmethod
    def _keep_order(k: _Kind) -> None:
        """Before the general path counts an op of this type: the keys the ops applied so far will
        add to, in the coverage dicts, go first (as they would, counted one by one)."""
        if k.rule is not None and k.n > k.slow and k.rule_name not in k.cov.rules:
            k.cov.rules[k.rule_name] = 0
            k.cov.emitted.setdefault(k.new_type, 0)

    def _count_kinds(self, kinds: dict[str, _Kind], order: list[Op], out: Outcome) -> None:
        """Stats and coverage of the ops applied in `_lower`; coverage in the order op types first occur."""
        stats = out.stats
        firsts = {}
        for t, k in kinds.items():
            if k.mode is _TARGET:
                continue
            firsts[k.first] = t
            c = k.cov
            c.count = k.n
            for skipped, count in k.skips.items():
                for r in k.cands[:skipped]:
                    stats[r.name].tries += count
            applied = k.n - k.slow
            if k.rule is None or not applied:
                continue
            for r in k.cands[:k.at]:
                stats[r.name].tries += applied
            st = stats[k.rule_name]
            st.tries += applied
            st.matches += applied
            st.applied += applied
            c.rules[k.rule_name] = c.rules.get(k.rule_name, 0) + applied
            c.emitted[k.new_type] = c.emitted.get(k.new_type, 0) + applied
        if len(firsts) > 1:
            cov, types = out.coverage, []
            for op in order:
                t = firsts.get(op)
                if t is not None:
                    types.append(t)
                    if len(types) == len(firsts):
                        break
            out.coverage = {t: cov[t] for t in types}

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
                  config: RewriteConfig, order: list[Op] | None = None) -> None:
        """Apply `index`'s rules wherever they match until none does (or the budget runs out).

        A worklist: every op in execution order, then (first in, first out) what rewrites touched
        and is not queued already. The first pass walks the order itself, so a pass in which no
        rule fires builds no queue: an op of the order is queued while the walk has not reached
        it (positions are looked up from the first rewrite on), any other while in `again`.
        `order`: the graph's execution order when the caller knows it is still `topo_order()`'s.
        """
        if order is None:
            try:
                order = graph.topo_order()
            except GraphError as exc:
                out.diagnostics.append(error(str(exc), code="cycle"))
                return
        budget = Budget(config, len(order))
        recent: collections.deque[str] = collections.deque(maxlen=32)
        applied = 0
        again: collections.deque[Op] = collections.deque()
        queued: set[int] = set()  # ids of the ops in `again`
        pos: dict[int, int] | None = None
        by_type = index.by_type
        per_type: dict[str, _Tries] = {}  # for each op type met
        failed: set[int] = set()  # (a fail here reports only: nothing reads it)
        i, n = 0, len(order)
        while True:
            if i < n:
                op = order[i]
                i += 1
            elif again:
                op = again.popleft()
                queued.discard(id(op))
            else:
                break
            if op.dead:
                continue
            t = op.type
            cands = by_type.get(t)
            if not cands:
                continue
            d = per_type.get(t)
            if d is None:
                d = per_type[t] = _Tries(cands, self.decidable)
            if d.steps:
                flags = None
                if d.key is not None:
                    ops = op.operands
                    if len(ops) == d.nops and len(op.results) == d.nres and None not in ops:
                        key = d.key(op)
                        try:
                            flags = d.memo[key]
                        except KeyError:
                            flags = d.memo[key] = self._matches(d.decided, op) if key is not NO_KEY else None
                        except TypeError:  # an unhashable key (a shape held as a list)
                            pass
                skipped = 0
                for step in d.steps:
                    if step.__class__ is int:
                        if flags is None or flags[step]:
                            break
                    elif step(op):
                        break
                    skipped += 1
                if skipped:
                    d.counts[skipped] += 1
                    cands = d.suffixes[skipped]
                    if not cands:
                        continue
            done = self._apply_first(graph, op, cands, out, reasons, failed)
            if done is None:
                continue
            name, new_ops = done
            applied += 1
            recent.append(name)
            if budget.exhausted(applied, len(graph)):
                out.diagnostics.append(budget.error(what, applied, recent, index.rules))
                break
            # revisit what the rewrite touched: the new ops and the consumers of their results
            touched = list(new_ops)
            for new in new_ops:
                touched.extend(u for r in new.results for u, _ in r.users)
            if pos is None:
                pos = {id(o): j for j, o in enumerate(order)}
            for o in touched:
                if o.dead or id(o) in queued or pos.get(id(o), -1) >= i:
                    continue
                again.append(o)
                queued.add(id(o))
        for t, d in per_type.items():
            for skipped, count in enumerate(d.counts):
                if count:
                    for r in by_type[t][:skipped]:
                        out.stats[r.name].tries += count

    @staticmethod
    def _matches(rules: tuple[CompiledRule, ...], op: Op) -> tuple[bool, ...]:
        """For a fixpoint's memo: whether each rule may match `op` (a guard error counts as a match:
        the general path reports it)."""
        got = []
        for rule in rules:
            try:
                got.append(rule.match(op) is not None)
            except GuardError:
                got.append(True)
        return tuple(got)

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
