"""Checks one rule: its patterns, the names it binds and uses, its expressions and its emit block."""

from __future__ import annotations

import attrs

from qlower.diagnostics import Note, Span, error, warning
from qlower.graph.types import canonical_dtype
from qlower.lang import ast
from qlower.lang.checker_sigs import Context, OpSig, attr_literal_ok
from qlower.lang.checker_types import ANY, DTYPE_CONSTANTS, ExprTyper, assignable, join, suggest

PATTERN_KINDS = frozenset({"capture", "rest", "dim", "attr", "nested"})
_DESCRIBE = {"capture": "a value capture", "rest": "a rest capture", "dim": "a dim capture",
             "attr": "an attribute capture", "nested": "a value capture", "let": "a `let`",
             "emit": "an emitted value", "result": "a result of the root"}


@attrs.define
class Binding:
    name: str
    kind: str  # one of _DESCRIBE
    type: str
    span: Span | None
    used: bool = False


def lit(v: object) -> str:
    """A pattern literal as the rule author wrote it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return "none" if v is None else str(v)


def _names(ns: set[str]) -> str:
    return ", ".join(f"`{n}`" for n in sorted(ns)) or "nothing"


def binding_spans(rule: ast.Rule) -> dict[str, Span | None]:
    """Where each name of a rule is first bound (the span of the binding node; a
    `let`'s span starts at the keyword), for "bound after its use" notes."""
    out: dict[str, Span | None] = {}

    def pat(p: ast.OpPattern) -> None:
        for o in p.operands:
            operand(o)
        for a in p.attrs:
            if a.kind == "capture":
                out.setdefault(str(a.value), a.span)

    def operand(o) -> None:
        if isinstance(o, (ast.Capture, ast.RestCapture, ast.NamedNested)):
            out.setdefault(o.name, o.span)
        if isinstance(o, (ast.Capture, ast.Wildcard)) and o.type is not None and o.type.shape:
            for d in o.type.shape:
                if d.kind == "capture":
                    out.setdefault(str(d.value), d.span)
        if isinstance(o, ast.OpPattern):
            pat(o)
        elif isinstance(o, ast.NamedNested):
            pat(o.pattern)
        elif isinstance(o, ast.Alternatives):
            for x in o.options:
                operand(x)

    for s in rule.body:
        if isinstance(s, ast.Match):
            for n in s.binders.names:
                out.setdefault(n, s.binders.span)
            pat(s.pattern)
        elif isinstance(s, ast.Let):
            out.setdefault(s.name, s.span)
        elif isinstance(s, ast.Emit):
            for item in s.items:
                if isinstance(item, ast.EmitLet):
                    out.setdefault(item.name, item.span)
                    continue
                for n in item.binders.names:
                    out.setdefault(n, item.binders.span)
    return out


# Value-type constraints may name a family instead of one dtype (see qlower/rewrite/match.py).
DTYPE_FAMILIES = ("float", "int", "any")


class RuleChecker:
    """Walks a rule's statements in order, keeping the names bound so far."""

    def __init__(self, ctx: Context, rule: ast.Rule):
        self.ctx = ctx
        self.rule = rule
        self.scope: dict[str, Binding] = {}
        self.results: list[str] = []
        self.produced: dict[str, Span | None] = {}
        self.emitted: dict[bool, str] = {}  # is-qnn → first emitted op of that kind
        self._log: list[str] | None = None  # names bound inside an alternative
        self._alt_before: set[str] = set()
        self._bound_later = binding_spans(rule)
        self._used_early: set[str] = set()  # used before being bound: reported once, not again as unused
        self.typer = ExprTyper(ctx.functions, ctx.report, self._lookup, lambda: list(self.scope), self._later)
        self.name_span = ctx.locate.find(rule.span, rule.name, after="rule")

    def _lookup(self, name: str, span: Span | None) -> str | None:
        b = self.scope.get(name)
        if b is None:
            return None
        b.used = True
        return b.type

    def _later(self, name: str) -> Span | None:
        span = self._bound_later.get(name)
        if span is None:
            return None
        self._used_early.add(name)
        return self._at(span, name, after="let") if self._is_let(name) else span

    def _is_let(self, name: str) -> bool:
        return any(isinstance(s, ast.Let) and s.name == name for s in self.rule.body)

    def _at(self, span: Span | None, name: str, after: str | None = None) -> Span | None:
        return self.ctx.locate.find(span, name, after)

    # ------------------------------------------------------------------ run

    def run(self) -> None:
        r, ctx = self.rule, self.ctx
        ctx.check_backends(r.backends, r.span)
        has_fail = any(isinstance(s, ast.Fail) for s in r.body)
        if not r.matches:
            ctx.report(error(f"rule `{r.name}` has no `match`", span=self.name_span, code="no-match"))
        if not has_fail and not any(isinstance(s, ast.Emit) for s in r.body):
            ctx.report(error(f"rule `{r.name}` has neither `emit` nor `fail`", span=self.name_span, code="no-emit"))
            has_fail = True  # nothing to say about results that are not emitted
        root = True
        for s in r.body:
            if isinstance(s, ast.Match):
                self._match(s, root)
                root = False
            elif isinstance(s, ast.Require):
                self.typer.expect(s.expr, "bool", "a `require` condition")
            elif isinstance(s, ast.Let):
                t = self.typer.infer(s.expr)
                self._define(s.name, "let", t, self._at(s.span, s.name, after="let"))
            elif isinstance(s, ast.Fail):
                self.typer.expect(s.message, "str", "a `fail` message")
            elif isinstance(s, ast.Emit):
                for item in s.items:
                    self._emit(item)
        if not has_fail:
            for name in self.results:
                if name not in self.produced:
                    ctx.report(error(f"result `{name}` of the root is never emitted", span=self.scope[name].span,
                                     hint=f"add `{name} = ...` to the emit block, or `fail` for unsupported cases",
                                     code="missing-result"))
        if r.matches:
            self._unused()
        if len(self.emitted) == 2:
            ctx.note(f"rule `{r.name}` emits both QNN ops ({self.emitted[True]}) and source ops "
                     f"({self.emitted[False]})", self.name_span, "mixed-emit")

    def _unused(self) -> None:
        for b in self.scope.values():
            if b.used or b.name.startswith("_"):
                continue
            if b.kind in PATTERN_KINDS:
                hint = f"name it `_{b.name}` (or use `_`) if it is only matched"
                if b.name in DTYPE_CONSTANTS:
                    hint = f'`{b.name}` here is a capture; write "{canonical_dtype(b.name)}" to match the dtype'
                self.ctx.report(warning(f"capture `{b.name}` is never used", span=b.span, hint=hint,
                                        code="unused-capture"))
            elif b.kind == "let":
                self.ctx.report(warning(f"`{b.name}` is never used", span=b.span, code="unused-let"))
            elif b.kind == "emit":
                self.ctx.report(warning(f"emitted value `{b.name}` is never used", span=b.span,
                                        code="unused-value"))

    # -------------------------------------------------------------- binding

    def _bind(self, name: str, kind: str, type_: str, span: Span | None) -> None:
        """Bind a pattern name; binding it again means "the same value" (a constraint)."""
        if name == "_":
            return
        if self._log is not None:
            self._log.append(name)
        b = self.scope.get(name)
        if b is None:
            self.scope[name] = Binding(name, kind, type_, span, used=name in self._used_early)
        elif b.kind in PATTERN_KINDS and kind in PATTERN_KINDS and join(b.type, type_) == b.type:
            if self._log is None or name in self._alt_before:
                b.used = True
        else:
            b.used = True
            msg = (f"`{name}` names a result of the root; it cannot also be captured" if b.kind == "result"
                   else f"`{name}` is already bound as {_DESCRIBE[b.kind]}")
            self.ctx.report(error(msg, span=span, code="binding-conflict", notes=[Note("bound here", b.span)]))

    def _define(self, name: str, kind: str, type_: str, span: Span | None) -> None:
        if name == "_":
            return
        b = self.scope.get(name)
        if b is not None:
            self.ctx.report(error(f"`{name}` is already bound as {_DESCRIBE[b.kind]}", span=span, code="redefined",
                                  notes=[Note("bound here", b.span)]))
            return
        self.scope[name] = Binding(name, kind, type_, span, used=name in self._used_early)

    # ------------------------------------------------------------- patterns

    def _match(self, m: ast.Match, root: bool) -> None:
        names = [n for n in m.binders.names if n != "_"]
        rtype = "list[value]" if m.binders.rest else "value"
        if root:
            for n in names:
                span = self._at(m.binders.span, n)
                if n in self.scope:
                    self._define(n, "result", rtype, span)
                else:
                    self.scope[n] = Binding(n, "result", rtype, span, used=True)
                    self.results.append(n)
        else:
            self._dag_binders(m.binders, names)
        for sig in self._pattern(m.pattern):
            self.ctx.check_results(sig, m.binders, m.binders.span)

    def _dag_binders(self, binders: ast.Binders, names: list[str]) -> None:
        bound = [n for n in names if n in self.scope]
        if not bound:
            values = [b.name for b in self.scope.values() if b.type == "value" and b.kind != "result"]
            what = f"`{names[0]}` is not" if names else "`_` is not"
            self.ctx.report(error(f"{what} a value captured earlier; a later `match` constrains the producer of one",
                                  span=binders.span, hint=suggest(names[0], values) if names else None,
                                  code="dag-binder"))
        for n in names:
            b = self.scope.get(n)
            if b is None:
                self._bind(n, "capture", "value", self._at(binders.span, n))
                self.scope[n].used = not bound  # already reported
                continue
            b.used = True
            if b.kind not in PATTERN_KINDS or b.type != "value":
                self.ctx.report(error(f"`{n}` is {_DESCRIBE[b.kind]}, not a captured value", span=binders.span,
                                      code="dag-binder", notes=[Note("bound here", b.span)]))

    def _pattern(self, p: ast.OpPattern) -> list[OpSig]:
        sigs = []
        for t in p.op_types:
            sig = self.ctx.resolve(t, self._at(p.span, t))
            if sig is not None:
                sigs.append(sig)
        name_span = self._at(p.span, p.op_types[0])
        ops = p.operands
        for i, o in enumerate(ops):
            if isinstance(o, ast.RestCapture) and i != len(ops) - 1:
                self.ctx.report(error(f"rest capture `{o.name}...` must be the last operand", span=o.span,
                                      code="rest-position"))
        fixed = sum(1 for o in ops if not isinstance(o, ast.RestCapture))
        for sig in sigs:
            self.ctx.check_arity(sig, fixed, fixed != len(ops), name_span)
            if p.commutative and sig.inputs != (2, 2):
                self.ctx.report(error(f"`commutative` needs an op with two operands; {sig.name} is not one",
                                      span=name_span, code="commutative-arity"))
        for o in ops:
            self._operand(o)
        self._attr_pats(p, sigs)
        return sigs

    def _attr_pats(self, p: ast.OpPattern, sigs: list[OpSig]) -> None:
        seen: dict[str, ast.AttrPat] = {}
        for a in p.attrs:
            if a.name in seen:
                self.ctx.report(error(f"attribute `{a.name}` is matched twice", span=a.span, code="duplicate-attr",
                                      notes=[Note("first matched here", seen[a.name].span)]))
                continue
            seen[a.name] = a
            types = []
            for sig in sigs:
                asig = sig.attrs.get(a.name)
                if asig is None:
                    code = "unknown-param" if sig.target else "unknown-attr"
                    self.ctx.report(error(f"unknown {sig.word} `{a.name}` for {sig.name}", span=a.span,
                                          hint=suggest(a.name, sig.attrs), code=code))
                    continue
                types.append(asig.type)
                if a.kind != "literal":
                    continue
                if not attr_literal_ok(asig, a.value):
                    self.ctx.report(error(f"{lit(a.value)} does not fit {sig.word} `{a.name}` of {sig.name} "
                                          f"({asig.type})", span=a.span, code="attr-literal-type"))
                elif asig.enum:
                    self.ctx.check_enum(sig, asig, ast.Literal(a.value, span=a.span))
            if a.kind == "capture":
                t = types[0] if types else ANY
                for u in types[1:]:
                    t = join(t, u) or ANY
                self._bind(str(a.value), "attr", t, self._at(a.span, str(a.value), after=":"))
                if not types and a.value in self.scope:
                    self.scope[str(a.value)].used = True  # already reported as unknown

    def _operand(self, o: ast.OperandPat) -> None:
        if isinstance(o, ast.Capture):
            self._value_type(o.type)
            self._bind(o.name, "capture", "value", self._at(o.span, o.name))
        elif isinstance(o, ast.Wildcard):
            self._value_type(o.type)
        elif isinstance(o, ast.RestCapture):
            self._bind(o.name, "rest", "list[value]", self._at(o.span, o.name))
        elif isinstance(o, ast.OpPattern):
            self._pattern(o)
        elif isinstance(o, ast.NamedNested):
            self._bind(o.name, "nested", "value", self._at(o.span, o.name))
            self._pattern(o.pattern)
        elif isinstance(o, ast.Alternatives):
            self._alternatives(o)

    def _alternatives(self, alt: ast.Alternatives) -> None:
        outer_log, outer_before = self._log, self._alt_before
        before = set(self.scope) if outer_log is None else outer_before
        self._alt_before = before
        first: tuple[set[str], ast.OperandPat] | None = None
        for opt in alt.options:
            self._log = []
            self._operand(opt)
            names = set(self._log) - before
            if first is None:
                first = (names, opt)
            elif names != first[0]:
                self.ctx.report(error(f"this alternative binds {_names(names)} but the first binds "
                                      f"{_names(first[0])}", span=opt.span, code="alt-binds",
                                      notes=[Note("first alternative here", first[1].span)]))
            if outer_log is not None:
                outer_log.extend(self._log)
        self._log, self._alt_before = outer_log, outer_before

    def _value_type(self, vt: ast.ValueType | None) -> None:
        if vt is None:
            return
        if vt.dtype is not None and canonical_dtype(vt.dtype) is None and vt.dtype not in DTYPE_FAMILIES:
            self.ctx.report(error(f"unknown dtype `{vt.dtype}`", span=self._at(vt.span, vt.dtype),
                                  hint=suggest(vt.dtype, DTYPE_CONSTANTS), code="unknown-dtype"))
        rests = [d for d in vt.shape or () if d.kind == "rest"]
        for d in rests[1:]:
            self.ctx.report(error("a shape pattern may hold one `...` only", span=d.span, code="dim-rest"))
        for d in vt.shape or ():
            if d.kind == "capture":
                self._bind(str(d.value), "dim", "int", d.span)

    # ----------------------------------------------------------------- emit

    def _emit(self, item: ast.EmitItem) -> None:
        ctx = self.ctx
        if isinstance(item, ast.EmitLet):
            t = self.typer.infer(item.expr)
            self._define(item.name, "let", t, self._at(item.span, item.name, after="let"))
            return
        if isinstance(item, ast.EmitOp):
            op_span = self._at(item.span, item.op)
            sig = ctx.resolve(item.op, op_span)
            for a in item.args:
                self._arg(a)
            if sig is not None:
                ctx.check_args(sig, item.args, op_span)
                ctx.check_params(sig, item.params, self.typer, op_span)
                ctx.check_results(sig, item.binders, item.binders.span)
                self.emitted.setdefault(sig.target, sig.name)
            else:
                for p in item.params:
                    self.typer.infer(p.expr)
            ctx.check_props(item.props, self.typer)
        elif isinstance(item, ast.EmitAlias):
            src = ast.Name(item.source, span=self._at(item.span, item.source, after="="))
            self._value_arg(src)
            if len(item.binders.names) != 1 or item.binders.rest:
                ctx.report(error("an alias binds exactly one name", span=item.binders.span, code="result-arity"))
        else:
            self.typer.expect(item.expr, "tensor", "`tensor(...)` data")
            ctx.check_props(item.props, self.typer)
        self._emit_binders(item.binders)

    def _arg(self, a: ast.Arg) -> None:
        if a.kind == "value":
            self._value_arg(ast.Name(a.name or "", span=a.span))
        elif a.kind == "rest":
            t = self.typer.infer(ast.Name(a.name or "", span=a.span))
            if not assignable(t, "list[value]"):
                self.ctx.report(error(f"`{a.name}...` needs a list of values; `{a.name}` is {t}", span=a.span,
                                      code="type-mismatch"))
        elif a.kind == "tensor" and a.expr is not None:
            self.typer.expect(a.expr, "tensor", "`tensor(...)` data")

    def _value_arg(self, name: ast.Name) -> None:
        if name.id in self.results and name.id not in self.produced:
            self.ctx.report(error(f"`{name.id}` is the root's result, which this rule replaces; it cannot be an "
                                  "input before it is emitted", span=name.span, code="result-before-emit"))
        t = self.typer.infer(name)
        if not assignable(t, "value"):
            hint = f"pass the list as `{name.id}...`" if t == "list[value]" else None
            self.ctx.report(error(f"`{name.id}` is {t}, not a value", span=name.span, hint=hint,
                                  code="type-mismatch"))

    def _emit_binders(self, binders: ast.Binders) -> None:
        for name in binders.names:
            if name == "_":
                continue
            span = self._at(binders.span, name)
            b = self.scope.get(name)
            if name in self.results:
                if name in self.produced:
                    self.ctx.report(error(f"`{name}` is emitted twice", span=span, code="duplicate-emit",
                                          notes=[Note("first emitted here", self.produced[name])]))
                self.produced.setdefault(name, span)
            elif b is not None and b.kind in PATTERN_KINDS:
                b.used = True
                self.ctx.report(error(f"cannot rebind captured `{name}`; only results of the root can be rebound",
                                      span=span, code="rebind-capture", notes=[Note("captured here", b.span)]))
            elif b is not None and b.kind == "emit":
                self.ctx.report(error(f"`{name}` is emitted twice", span=span, code="duplicate-emit",
                                      notes=[Note("first emitted here", b.span)]))
            else:
                self._define(name, "emit", "list[value]" if binders.rest else "value", span)
