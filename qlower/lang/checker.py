"""Semantic checks run when rules load, so mistakes surface before any graph is lowered.

`check` sees a whole rule set (op declarations and rules are global to it) and
returns every finding as a located Diagnostic with a stable `code`; it never
raises for bad input. Rule bodies are checked by `checker_rules`, tests by
`checker_tests`, expressions by `checker_types`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, MutableMapping, Sequence

import attrs

from qlower.diagnostics import Diagnostic, Note, SourceCache, did_you_mean, error, warning
from qlower.lang import ast
from qlower.lang.checker_rules import RuleChecker
from qlower.lang.checker_sigs import BACKENDS, Context, Locator
from qlower.lang.checker_tests import TestChecker
from qlower.lang.checker_types import ATTR_TYPES, DTYPE_CONSTANTS, ExprTyper, suggest, unknown_backend
from qlower.lang.formatter_parts import format_expr
from qlower.lang.names import qualify
from qlower.lang.optypes import emitted_op_types

from qlower.lang.registry import TargetRegistry
from qlower.lang.functions import FunctionTable

__all__ = ["CODES", "check"]

# Every `code` a rule-set finding can carry (parser and loader codes included).
CODES: dict[str, str] = {
    "syntax": "the text does not parse",
    "io": "a rule file cannot be read",
    "unknown-import": "an import names no file or rule pack",
    "empty-folder": "a rule folder holds no .qpat files (warning)",
    "reserved-dialect": "an op declared in the `qnn` dialect",
    "duplicate-op": "an op declared twice",
    "operand-order": "optional operand before a mandatory one, or variadic operand not last",
    "result-order": "variadic result not last",
    "commutative-arity": "`commutative` on an op without exactly two operands",
    "duplicate-name": "an operand, result or attribute declared twice in one op",
    "unknown-type": "an attribute type that does not exist",
    "unknown-op": "a source op that is not declared",
    "unknown-target-op": "a `qnn.*` op the registry does not know",
    "dynamic-source-op": "an op type given per match (`k: op` passed an expression) that can be a non-`qnn.*` op",
    "unknown-attr": "an attribute the source op does not declare",
    "unknown-param": "a param the QNN op does not have",
    "attr-literal-type": "a pattern literal of the wrong type for its attribute",
    "attr-type": "an attribute value of the wrong type (emit or test graph)",
    "param-type": "a QNN param value of the wrong type",
    "param-enum": "a literal enum param value that is not one of the enum's values",
    "missing-attr": "an attribute without default not given (emit or test graph)",
    "missing-param": "a mandatory QNN param without default not given",
    "duplicate-attr": "an attribute matched twice in one pattern",
    "duplicate-param": "a param or attribute given twice",
    "duplicate-prop": "a value prop (shape, dtype, encoding) given twice",
    "arity": "too many or too few operands for the op",
    "absent-mandatory": "`_` passed for a mandatory operand",
    "result-arity": "wrong number of names bound to an op's results",
    "undefined-name": "a name not bound (yet) where it is used",
    "unknown-function": "a call to a function the function table lacks",
    "call-arity": "a call with the wrong number of arguments",
    "type-mismatch": "an expression of the wrong type",
    "unknown-dtype": "a dtype name that does not exist",
    "unknown-backend": "a backend name that is not one of qlower.qnn.backends.BACKENDS",
    "backend-decided": "an `if` or `require` that `backend()` decides alike on every backend of the rule (warning)",
    "rest-position": "a rest capture `xs...` that is not the last operand",
    "dim-rest": "more than one `...` in a shape pattern",
    "binding-conflict": "one name bound as two different things in patterns",
    "redefined": "a `let`, emitted value or test value that reuses a bound name",
    "alt-binds": "alternatives that bind different names",
    "dag-binder": "a later `match` whose binder is not a value captured earlier",
    "no-match": "a rule without `match`",
    "no-emit": "a rule with neither `emit` nor `fail`",
    "missing-result": "a result of the root that the emit block never produces",
    "duplicate-emit": "a name emitted twice",
    "rebind-capture": "an emit that rebinds a captured operand",
    "result-before-emit": "the root's result used as an input before it is emitted",
    "unused-capture": "a capture never used (warning)",
    "unused-let": "a `let` never used (warning)",
    "unused-value": "an emitted value never used (warning)",
    "shadowed-rule": "a rule that an earlier-tried catch-all rule hides (warning)",
    "self-feeding": "a rule matching every op of its root type that emits that type again (never converges)",
    "mixed-emit": "a rule emitting both QNN and source ops (note)",
    "duplicate-rule": "two rules with one name",
    "duplicate-test": "two tests with one name",
    "unknown-rule": "a test for (or expecting) a rule that does not exist",
    "dim-range": "a test dim range lo..hi with lo > hi",
    "test-no-graph": "a test without a `graph`",
    "encoded-float": "a test input or constant of a float type given an encoding (quantized storage is integer)",
    "unknown-fragment": "an emit call that names no visible fragment, or gives it the wrong arguments",
    "duplicate-fragment": "two fragments with one name in one pack (or one user file)",
    "fragment-scope": "a fragment using a value that is neither its parameter nor its own",
    "fragment-result": "a fragment that never binds one of its results",
    "duplicate-def": "two defs with one name in one pack (or one user file)",
    "default-fragment": "a default (`?=`) that calls a fragment (a default emits one op, alias or tensor)",
    "def-scope": "a def whose body uses a name that is not its parameter",
    "def-shadows": "a def named like a built-in function",
    "def-recursive": "a def that calls itself",
    "branch-name": "a name used after an emit `if` that only one of its branches binds",
}


def check(modules: Sequence[ast.Module], *, registry: TargetRegistry, functions: FunctionTable,
          sources: SourceCache | None = None, focus: Collection[str] | None = None,
          groups: Mapping[str, str] | None = None, memo: MutableMapping | None = None) -> list[Diagnostic]:
    """All findings for a rule set, ordered by file (as given) and position.

    `sources` (the texts the modules were parsed from) lets findings point at
    the exact name inside a node, e.g. the op of an emit item. `focus` (file
    names) checks only those files' rules and tests in depth, the others giving
    just their names and declarations: an editor re-checking one changed file.
    `groups` (file → folder) tells which user files were loaded as one folder (they share fragments).
    `memo` (the parse cache of an editor's repeated checks) keeps each rule's findings: a rule that is
    the very object of an earlier check, checked against the very declarations and defs, reports them
    again without being re-checked (an edit re-checks the rules it changed).
    """
    ctx = Context(registry, functions, Locator(sources))
    ctx.defines.update({d.name: len(d.params) for m in modules for d in m.defines})
    ctx.recursive_defs.update(_recursive_defs([d for m in modules for d in m.defines]))
    for m in modules:
        for d in m.ops:
            _check_decl(ctx, d)
        for c in m.computes:
            _check_compute(ctx, c)
    rules = [r for m in modules for r in m.rules]
    keys = {id(r): qualify(m.namespace, r.name) for m in modules for r in m.rules}
    for r in rules:
        first = ctx.rules.setdefault(keys[id(r)], r)
        if first is not r:
            ctx.report(error(f"rule `{r.name}` is defined twice", span=_name_span(ctx, r, "rule"),
                             code="duplicate-rule", notes=[Note("first defined here", _name_span(ctx, first, "rule"))]))
    overridden = _check_overrides(ctx, modules)
    deep = {id(x) for m in modules if focus is None or m.file in focus for x in (*m.rules, *m.tests)}
    broken: set[int] = set()  # rules with errors do not shadow others
    seen_with = _Setting(tuple(ctx.decls.values()), tuple(sorted(ctx.defines.items())),
                         frozenset(ctx.recursive_defs), registry, functions)
    for r in rules:
        if id(r) not in deep:
            continue
        n = ctx.errors
        _check_rule(ctx, r, memo, seen_with)
        if ctx.errors > n:
            broken.add(id(r))
    _check_fragments(ctx, modules, focus, groups)
    tests: dict[str, ast.Test] = {}
    for m in modules:
        for t in m.tests:
            first_t = tests.setdefault(qualify(m.namespace, t.name), t)
            if first_t is not t:
                ctx.report(error(f"test `{t.name}` is defined twice", span=_name_span(ctx, t, "test"),
                                 code="duplicate-test",
                                 notes=[Note("first defined here", _name_span(ctx, first_t, "test"))]))
            if id(t) in deep:
                TestChecker(ctx, t, m.namespace).run()
    _check_shadowing(ctx, [r for r in rules if id(r) not in overridden], broken, keys)
    order = {m.file: i for i, m in enumerate(modules)}
    big = len(order)
    # a map line's rule and its generated test can find the same fault at the same place: say it once
    seen: set = set()
    unique = [d for d in ctx.diagnostics
              if not ((k := (d.code, d.message, str(d.span))) in seen or seen.add(k))]
    return sorted(unique, key=lambda d: (order.get(d.span.file, big), d.span.line, d.span.column)
                  if d.span else (big + 1, 0, 0))


@attrs.frozen(eq=False)
class _Setting:
    """What one rule's checks read besides the rule: the declarations and defs, registry and functions."""

    decls: tuple[ast.OpDecl, ...]
    defines: tuple[tuple[str, int], ...]
    recursive_defs: frozenset[str]
    registry: TargetRegistry
    functions: FunctionTable

    def same_as(self, other: _Setting) -> bool:
        """The very declaration objects, registry and functions; equal defs."""
        return (len(self.decls) == len(other.decls) and all(a is b for a, b in zip(self.decls, other.decls))
                and self.defines == other.defines and self.recursive_defs == other.recursive_defs
                and self.registry is other.registry and self.functions is other.functions)


def _check_rule(ctx: Context, r: ast.Rule, memo: MutableMapping | None, seen_with: _Setting) -> None:
    """One rule's checks, or (with `memo`) the findings they gave this very rule in the same setting."""
    key = ("checked", id(r))  # beside the parse cache's keys; the entry keeps `r` alive, so ids stay unique
    hit = memo.get(key) if memo is not None else None
    if hit is not None and hit[0] is r and hit[1].same_as(seen_with):
        for d in hit[2]:
            ctx.report(d)
        return
    start = len(ctx.diagnostics)
    RuleChecker(ctx, r).run()
    _check_cleanup(ctx, r)
    _check_self_feeding(ctx, r)
    if memo is not None:
        memo[key] = (r, seen_with, tuple(ctx.diagnostics[start:]))


def _name_span(ctx: Context, item: ast.Rule | ast.Test, keyword: str):
    return ctx.locate.find(item.span, item.name, after=keyword)


# ------------------------------------------------------------- declarations


def _check_compute(ctx: Context, c: ast.ComputeDecl) -> None:
    from qlower.graph.types import DTYPE_NAMES, canonical_dtype

    for name in (*c.sources, c.target):
        if canonical_dtype(name) is None:
            ctx.report(error(f"unknown dtype `{name}`", span=ctx.locate.find(c.span, name), code="unknown-dtype",
                             hint=did_you_mean(name, sorted(DTYPE_NAMES))))
    if c.target in c.sources or canonical_dtype(c.target) in {canonical_dtype(n) for n in c.sources}:
        ctx.report(error(f"`compute` maps `{c.target}` to itself", span=c.span, code="type-mismatch"))
    for op in c.ops:
        if not ctx.is_target(op) or ctx.registry.op(op.partition(".")[2]) is None:
            ctx.report(error(f"`compute ... for` names `{op}`, which is no {ctx.dialect.upper()} op",
                             span=ctx.locate.find(c.span, op), code="unknown-op"))
    for b in c.backends or ():
        if b not in BACKENDS:
            ctx.report(unknown_backend(b, ctx.locate.find(c.span, b)))


def _check_decl(ctx: Context, d: ast.OpDecl) -> None:
    span = ctx.locate.find(d.span, d.op)
    if d.dialect == ctx.dialect:
        ctx.report(error(f"cannot declare `{d.op}`: dialect `{ctx.dialect}` is reserved for "
                         f"{ctx.dialect.upper()} ops", span=span,
                         hint=f"{ctx.dialect.upper()} ops come from the OpDef registry; declare source ops in "
                              "their own dialect",
                         code="reserved-dialect"))
    else:
        first = ctx.decls.setdefault(d.op, d)
        if first is not d:
            ctx.report(error(f"op `{d.op}` is declared twice", span=span, code="duplicate-op",
                             notes=[Note("first declared here", ctx.locate.find(first.span, first.op))]))
    optional = None
    for i, o in enumerate(d.operands):
        if o.kind == "variadic" and i != len(d.operands) - 1:
            ctx.report(error(f"variadic operand `{o.name}...` must be the last operand", span=o.span,
                             code="operand-order"))
        elif o.kind == "one" and optional is not None:
            ctx.report(error(f"mandatory operand `{o.name}` follows optional operand `{optional.name}?`",
                             span=o.span, hint="optional operands come after all mandatory ones",
                             code="operand-order"))
        elif o.kind == "optional":
            optional = optional or o
    for i, r in enumerate(d.results):
        if r.variadic and i != len(d.results) - 1:
            ctx.report(error(f"variadic result `{r.name}...` must be the last result", span=r.span,
                             code="result-order"))
    if d.commutative and len(d.operands) != 2:
        ctx.report(error(f"`commutative` needs exactly two operands; {d.op} has {len(d.operands)}", span=span,
                         code="commutative-arity"))
    for group, what in ((d.operands, "operand"), (d.results, "result"), (d.attrs, "attribute")):
        seen: dict[str, object] = {}
        for x in group:
            if x.name in seen:
                ctx.report(error(f"{what} `{x.name}` is declared twice in {d.op}", span=x.span,
                                 code="duplicate-name", notes=[Note("first declared here", seen[x.name].span)]))
            seen.setdefault(x.name, x)
    typer = ExprTyper(ctx.functions, ctx.report, lambda n, s: None, lambda: [])
    for a in d.attrs:
        t = str(a.type)
        if t not in ATTR_TYPES:
            ctx.report(error(f"unknown attribute type `{t}`", span=a.type.span,
                             hint=suggest(t, ATTR_TYPES) or f"types are {', '.join(ATTR_TYPES)}",
                             code="unknown-type"))
        elif a.default is not None and not (isinstance(a.default, ast.Literal) and a.default.value is None):
            typer.expect(a.default, t, f"the default of `{a.name}`")


# ---------------------------------------------------------------- shadowing


def _count_ops(p: ast.OpPattern) -> int:
    def operand(o) -> int:
        if isinstance(o, ast.OpPattern):
            return _count_ops(o)
        if isinstance(o, ast.NamedNested):
            return _count_ops(o.pattern)
        if isinstance(o, ast.Alternatives):
            return max(operand(x) for x in o.options)
        return 0

    return 1 + sum(operand(o) for o in p.operands)


def benefit(rule: ast.Rule) -> int:
    """The explicit benefit, else the number of ops the rule's patterns match."""
    return rule.benefit if rule.benefit is not None else sum(_count_ops(m.pattern) for m in rule.matches)


def _matches_all(ctx: Context, rule: ast.Rule) -> bool:
    """Does the rule apply to every op of its root type: one op, plain captures, no conditions?"""
    ms = rule.matches
    if len(ms) != 1 or any(isinstance(s, ast.Require) for s in rule.body):
        return False
    p = ms[0].pattern
    names: set[str] = set()
    for o in p.operands:
        if isinstance(o, (ast.Capture, ast.Wildcard)) and o.type is not None:
            return False
        if isinstance(o, (ast.Capture, ast.RestCapture)):
            if o.name in names:
                return False  # a repeated capture is a constraint
            names.add(o.name)
        elif not isinstance(o, ast.Wildcard):
            return False
    for a in p.attrs:
        if a.kind == "literal" or (a.kind == "capture" and a.value in names):
            return False
        if a.kind == "capture":
            names.add(str(a.value))
    open_ = bool(p.operands) and isinstance(p.operands[-1], ast.RestCapture)
    for t in p.op_types:
        sig = ctx.sig(t)
        if sig is None or not (open_ or sig.inputs[0] == sig.inputs[1]):
            return False
    return True


def _check_self_feeding(ctx: Context, rule: ast.Rule) -> None:
    """A rewrite that matches every op of its root type and emits that type again never stops (an op
    type given per match counts when it can be a root type: `optype(y)` of the root always can; it emits
    target ops only, so only cleanup rules feed themselves that way)."""
    if not rule.matches or any(isinstance(s, ast.Require) for s in rule.body):
        return
    roots = rule.matches[0].pattern.op_types
    types = emitted_op_types(rule)
    again = [(i, t) for i in rule.emits if isinstance(i, ast.EmitOp)
             for t in (types.get(id(i)) or ()) if t in roots and (i.op_expr is None or ctx.is_target(t))]
    if again and _matches_all(ctx, rule):
        item, op = again[0]
        when = "" if item.op_expr is None else f", when {format_expr(item.op_expr)} is {op},"
        ctx.report(error(f"rule `{rule.name}` matches every {op} and{when} emits {op} again: it would rewrite "
                         f"its own output forever", span=ctx.locate.find(item.span, item.op),
                         hint="constrain the match (a `require`, an attribute or a value type) so the emitted op "
                              "no longer matches", code="self-feeding"))


def _check_cleanup(ctx: Context, rule: ast.Rule) -> None:
    """A rule rooted at QNN ops is a cleanup rule, run after lowering: it must stay within QNN."""
    if not rule.matches:
        return
    roots = rule.matches[0].pattern.op_types
    target = [ctx.is_target(t) for t in roots]
    where = ctx.locate.find(rule.matches[0].pattern.span, roots[0])
    if any(target) and not all(target):
        ctx.report(error("a rule's root alternatives are all QNN ops (a cleanup rule) or none are",
                         span=where, code="mixed-root"))
    elif all(target):
        for item in rule.emits:
            if isinstance(item, ast.EmitOp) and item.op_expr is None and not ctx.is_target(item.op):
                ctx.report(error(f"a cleanup rule (rooted at a QNN op) cannot emit `{item.op}`: it runs after "
                                 f"lowering, when only QNN ops remain", span=ctx.locate.find(item.span, item.op),
                                 code="cleanup-emits-source"))


def _first_of(ctx: Context, seen: dict, item, kind: str, where: str, deep: bool) -> bool:
    """Record `item` (a fragment or def) by name in `seen`; a second one of the name is an error
    located at it, with a note at the first. True when `item` is to be checked (`deep`)."""
    first = seen.setdefault(item.name, item)
    if first is not item and deep:
        ctx.report(error(f"{kind} `{item.name}` is defined twice in {where}",
                         span=ctx.locate.find(item.span, item.name, after=kind), code=f"duplicate-{kind}",
                         notes=[Note("first defined here", ctx.locate.find(first.span, first.name, after=kind))]))
    return deep


def _check_fragments(ctx: Context, modules: Sequence[ast.Module], focus: Collection[str] | None,
                     groups: Mapping[str, str] | None) -> None:
    """Fragments and defs at their definitions: one name per pack (a user's file is its own scope), every
    result bound, every value a fragment uses a parameter or its own, a def's body only its parameters;
    their expressions are checked where they are used (they need the caller's types)."""
    from qlower.lang.fragments import group_of, local_names  # noqa: PLC0415

    frags: dict[str, dict[str, ast.Fragment]] = {}
    defs: dict[str, dict[str, ast.Define]] = {}
    for m in modules:
        deep = focus is None or m.file in focus
        scope = group_of(m, groups)
        where = (f"pack `{m.namespace}`" if m.namespace else "this folder" if scope.startswith("folder:")
                 else "this file")
        for f in m.fragments:
            if _first_of(ctx, frags.setdefault(scope, {}), f, "fragment", where, deep):
                _check_fragment(ctx, f, local_names(f))
        for d in m.defines:
            if _first_of(ctx, defs.setdefault(scope, {}), d, "def", where, deep):
                _check_define(ctx, d)


def _check_fragment(ctx: Context, f: ast.Fragment, local: list[str]) -> None:
    ops = {p.name for p in f.params if p.op}
    known = {p.name for p in f.params} | set(local) | set(f.results)
    bound: set[str] = set()
    for item in ast.flat_items(f.body):
        for a in getattr(item, "args", ()):
            if a.kind in ("value", "rest") and a.name not in known:
                ctx.report(error(f"fragment `{f.name}` uses `{a.name}`, which is neither its parameter nor "
                                 "bound in it", span=a.span, code="fragment-scope"))
            elif a.kind in ("value", "rest") and a.name in ops:
                ctx.report(error(f"`{a.name}` is an op type (`{a.name}: op`), not a value", span=a.span,
                                 code="fragment-scope"))
        bound.update((item.name,) if isinstance(item, ast.EmitLet) else item.binders.names)
    for r in f.results:
        if r not in bound:
            ctx.report(error(f"fragment `{f.name}` never binds its result `{r}`", span=f.span,
                             code="fragment-result"))


def _check_define(ctx: Context, d: ast.Define) -> None:
    from qlower.lang.fragments import def_calls  # noqa: PLC0415

    at = ctx.locate.find(d.span, d.name, after="def")
    if ctx.functions.get(d.name) is not None:
        ctx.report(error(f"def `{d.name}` has the name of a built-in function", span=at, code="def-shadows",
                         hint="give it another name"))
    params = set(d.params)
    if len(params) != len(d.params):
        ctx.report(error(f"def `{d.name}` names a parameter twice", span=at, code="duplicate-name"))

    for x in ast.iter_nodes(d.expr):
        if isinstance(x, ast.Name) and x.id not in params and x.id not in DTYPE_CONSTANTS:  # (`f32` is a constant)
            ctx.report(error(f"def `{d.name}` uses `{x.id}`, which is not its parameter", span=x.span,
                             hint="a def sees only its parameters; pass the value as one", code="def-scope"))
    if any(c.func == d.name for c in def_calls(d.expr, {d.name: d})):
        ctx.report(error(f"def `{d.name}` calls itself", span=at, code="def-recursive"))
    elif d.name in ctx.recursive_defs:
        ctx.report(error(f"def `{d.name}` calls itself through another def", span=at, code="def-recursive"))


def _recursive_defs(defs: Sequence[ast.Define]) -> set[str]:
    """Defs that reach themselves through calls of defs; a name with two defs (two packs) is left out,
    as which one a call means depends on where it is."""
    from qlower.lang.fragments import def_calls  # noqa: PLC0415

    names = [d.name for d in defs]
    one = {d.name: d for d in defs if names.count(d.name) == 1}
    calls = {n: {c.func for c in def_calls(d.expr, one) if len(one[c.func].params) == len(c.args)}
             for n, d in one.items()}
    out: set[str] = set()
    for name in one:
        seen: set[str] = set()
        todo = list(calls[name])
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(calls[n])
        if name in seen:
            out.add(name)
    return out


def _check_overrides(ctx: Context, modules: Sequence[ast.Module]) -> set[int]:
    """`rule r overrides pack.rule`: the target must be a loaded rule of another pack. Returns the
    replaced rules (by id), which then neither run nor shadow."""
    out: set[int] = set()
    for m in modules:
        for r in m.rules:
            if r.overrides is None:
                continue
            at = ctx.locate.find(r.span, r.overrides, after="overrides")
            target = ctx.rules.get(r.overrides)
            if target is None:
                pack = r.overrides.split(".", 1)[0] if "." in r.overrides else None
                hint = suggest(r.overrides, ctx.rules) or (f"add `import {pack}`" if pack else
                                                           "name the rule with its pack, e.g. `mllm.gelu`")
                ctx.report(error(f"rule `{r.overrides}` to override is not loaded", span=at, hint=hint,
                                 code="unknown-rule"))
            elif target is r or r.overrides == qualify(m.namespace, target.name):
                ctx.report(error(f"rule `{r.name}` overrides a rule of its own pack", span=at,
                                 hint="edit or remove that rule instead", code="bad-override"))
            else:
                out.add(id(target))
    return out


def _check_shadowing(ctx: Context, rules: list[ast.Rule], broken: set[int], keys: dict[int, str]) -> None:
    """Warn about rules that an earlier-tried rule matching every op of their root type hides."""
    ranked = sorted(range(len(rules)), key=lambda i: (-benefit(rules[i]), i))
    catch_all: dict[str, list[ast.Rule]] = {}
    for i in ranked:
        r = rules[i]
        if not r.matches or ctx.rules.get(keys[id(r)]) is not r:
            continue
        types = r.matches[0].pattern.op_types
        backends = set(r.backends or BACKENDS)
        for s in catch_all.get(types[0], ()):
            s_types = s.matches[0].pattern.op_types
            if set(types) <= set(s_types) and backends <= set(s.backends or BACKENDS):
                ctx.report(warning(
                    f"rule `{r.name}` never applies: rule `{s.name}` matches every {' | '.join(types)} first",
                    span=_name_span(ctx, r, "rule"), code="shadowed-rule",
                    hint=f"constrain `{s.name}`, or give `{r.name}` a higher benefit",
                    notes=[Note(f"rule `{s.name}` is here", _name_span(ctx, s, "rule"))]))
                break
        if id(r) not in broken and _matches_all(ctx, r):
            for t in types:
                catch_all.setdefault(t, []).append(r)
