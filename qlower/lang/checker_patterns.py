"""Checks a rule's `match` statements: op types, operand and attribute patterns, captures."""

from __future__ import annotations

from qlower.diagnostics import Note, error
from qlower.graph.types import canonical_dtype
from qlower.lang import ast
from qlower.lang.checker_scope import DESCRIBE, PATTERN_KINDS, Binding, RuleScope, lit, names_text
from qlower.lang.checker_sigs import OpSig, attr_literal_ok
from qlower.lang.checker_types import ANY, DTYPE_CONSTANTS, join, suggest

# Value-type constraints may name a family instead of one dtype (see qlower/rewrite/match.py).
DTYPE_FAMILIES = ("float", "int", "any")


class PatternChecker(RuleScope):
    """Binds what patterns capture; `RuleChecker` adds the other statements."""

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
                self.ctx.report(error(f"`{n}` is {DESCRIBE[b.kind]}, not a captured value", span=binders.span,
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
                self.ctx.report(error(f"this alternative binds {names_text(names)} but the first binds "
                                      f"{names_text(first[0])}", span=opt.span, code="alt-binds",
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

