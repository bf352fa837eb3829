"""A rule's names while it is checked: what is bound, as what, and whether it is used."""

from __future__ import annotations

import attrs

from qlower.diagnostics import Note, Span, error
from qlower.lang import ast
from qlower.lang.checker_sigs import Context
from qlower.lang.checker_types import ExprTyper, join

PATTERN_KINDS = frozenset({"capture", "rest", "dim", "attr", "nested"})
DESCRIBE = {"capture": "a value capture", "rest": "a rest capture", "dim": "a dim capture",
            "attr": "an attribute capture", "nested": "a value capture", "let": "a `let`",
            "emit": "an emitted value", "result": "a result of the root",
            "branch": "a value bound in only one branch of an `if`"}


@attrs.define
class Binding:
    name: str
    kind: str  # one of DESCRIBE
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


def names_text(ns: set[str]) -> str:
    return ", ".join(f"`{n}`" for n in sorted(ns)) or "nothing"


def binding_spans(rule: ast.Rule) -> dict[str, tuple[Span | None, str | None]]:
    """Where each name of a rule is first bound, for "bound after its use" notes: the
    binding node's span and the keyword the name follows in it (a `let`'s span starts
    at `let`)."""
    out: dict[str, tuple[Span | None, str | None]] = {}

    def pat(p: ast.OpPattern) -> None:
        for o in p.operands:
            operand(o)
        for a in p.attrs:
            if a.kind == "capture":
                out.setdefault(str(a.value), (a.span, ":"))

    def operand(o) -> None:
        if isinstance(o, (ast.Capture, ast.RestCapture, ast.NamedNested)):
            out.setdefault(o.name, (o.span, None))
        if isinstance(o, (ast.Capture, ast.Wildcard)) and o.type is not None and o.type.shape:
            for d in o.type.shape:
                if d.kind == "capture":
                    out.setdefault(str(d.value), (d.span, None))
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
                out.setdefault(n, (s.binders.span, None))
            pat(s.pattern)
        elif isinstance(s, ast.Let):
            out.setdefault(s.name, (s.span, "let"))
        elif isinstance(s, ast.Emit):
            for item in ast.flat_items(s.items):
                if isinstance(item, ast.EmitLet):
                    out.setdefault(item.name, (item.span, "let"))
                    continue
                for n in item.binders.names:
                    out.setdefault(n, (item.binders.span, None))
    return out


class RuleScope:
    """Names bound so far in one rule, in statement order, with an expression typer over them."""

    def __init__(self, ctx: Context, rule: ast.Rule):
        self.ctx = ctx
        self.rule = rule
        self.scope: dict[str, Binding] = {}
        self.results: list[str] = []  # names of the root's results
        self._log: list[str] | None = None  # names bound inside an alternative
        self._alt_before: set[str] = set()
        self._bound_later = binding_spans(rule)
        self._used_early: set[str] = set()  # used before being bound: reported once, not again as unused
        self.typer = ExprTyper(ctx.functions, ctx.report, self._lookup, lambda: list(self.scope), self._later)
        self.typer.defines = ctx.defines
        self.typer.recursive = ctx.recursive_defs
        self.name_span = ctx.locate.find(rule.span, rule.name, after="rule")

    def _lookup(self, name: str, span: Span | None) -> str | None:
        b = self.scope.get(name)
        if b is None:
            return None
        if b.kind == "branch":
            self.ctx.report(error(f"`{name}` is bound in only one branch of the `if` above, so it may be unbound "
                                  "here", span=span, code="branch-name", notes=[Note("bound here", b.span)],
                                  hint=f"bind `{name}` in both branches (an `else` block), or use it inside the branch"))
            b.kind = "emit"  # said once
        b.used = True
        return b.type

    def _later(self, name: str) -> Span | None:
        """Where a name not bound yet is bound further down (None: nowhere)."""
        found = self._bound_later.get(name)
        if found is None:
            return None
        self._used_early.add(name)
        return self._at(found[0], name, after=found[1])

    def _at(self, span: Span | None, name: str, after: str | None = None) -> Span | None:
        return self.ctx.locate.find(span, name, after)

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
                   else f"`{name}` is already bound as {DESCRIBE[b.kind]}")
            self.ctx.report(error(msg, span=span, code="binding-conflict", notes=[Note("bound here", b.span)]))

    def _define(self, name: str, kind: str, type_: str, span: Span | None) -> None:
        if name == "_":
            return
        b = self.scope.get(name)
        if b is not None:
            self.ctx.report(error(f"`{name}` is already bound as {DESCRIBE[b.kind]}", span=span, code="redefined",
                                  notes=[Note("bound here", b.span)]))
            return
        self.scope[name] = Binding(name, kind, type_, span, used=name in self._used_early)

