"""Checks one rule: statement order, expressions, the emit block and what goes unused."""

from __future__ import annotations

from qlower.diagnostics import Note, Span, error, warning
from qlower.graph.types import canonical_dtype
from qlower.lang import ast
from qlower.lang.backend import decide, mentions_backend
from qlower.lang.checker_patterns import PatternChecker
from qlower.lang.checker_scope import PATTERN_KINDS
from qlower.lang.checker_sigs import Context
from qlower.lang.checker_types import DTYPE_CONSTANTS, ExprTyper, assignable
from qlower.lang.formatter_parts import format_expr
from qlower.lang.optypes import emitted_op_types
from qlower.qnn.backends import BACKENDS


class RuleChecker(PatternChecker):
    """Walks a rule's statements in order, keeping the names bound so far."""

    def __init__(self, ctx: Context, rule: ast.Rule):
        super().__init__(ctx, rule)
        self.produced: dict[str, Span | None] = {}
        self.emitted: dict[bool, str] = {}  # is-qnn → first emitted op of that kind
        self.branch_results: dict[str, Span | None] = {}  # root results emitted in one branch of an `if` only
        self.op_types = emitted_op_types(rule)  # each emitted op's possible types (by id), None when open

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
                if name not in self.produced and name in self.branch_results:
                    ctx.report(error(f"result `{name}` of the root is emitted in only one branch of an `if`",
                                     span=self.branch_results[name], code="missing-result",
                                     hint=f"emit `{name}` in both branches (an `else` block)"))
                elif name not in self.produced:
                    ctx.report(error(f"result `{name}` of the root is never emitted", span=self.scope[name].span,
                                     hint=f"add `{name} = ...` to the emit block, or `fail` for unsupported cases",
                                     code="missing-result"))
        if r.matches:
            self._unused()
        self._backend_decided()
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
            elif b.kind in ("emit", "branch"):
                self.ctx.report(warning(f"emitted value `{b.name}` is never used", span=b.span,
                                        code="unused-value"))

    # ----------------------------------------------------------------- emit

    def _emit_if(self, item: ast.EmitIf) -> None:
        """Both branches checked from the same names; after the `if`, a name is bound when both bind it
        (one bound by one branch only is an error where it is used, `branch-name`)."""
        self.typer.expect(item.cond, "bool", "an `if` condition")
        before, produced = dict(self.scope), dict(self.produced)
        for i in item.then:
            self._emit(i)
        then_scope, then_produced = self.scope, self.produced
        self.scope, self.produced = dict(before), dict(produced)
        for i in item.otherwise:
            self._emit(i)
        merged = dict(before)
        for name in (then_scope.keys() | self.scope.keys()) - before.keys():
            a, b = then_scope.get(name), self.scope.get(name)
            if a is not None and b is not None:
                a.used = a.used or b.used
                merged[name] = a
            else:
                x = a or b
                if x.kind in ("emit", "let"):
                    x.kind = "branch"  # a use after the `if` is an error (`branch-name`)
                merged[name] = x
        self.scope = merged
        for name in (then_produced.keys() | self.produced.keys()) - produced.keys():
            if name in then_produced and name in self.produced:
                produced[name] = then_produced[name]
            else:
                self.branch_results.setdefault(name, then_produced.get(name) or self.produced.get(name))
        self.produced = produced

    def _emit(self, item: ast.EmitItem) -> None:
        ctx = self.ctx
        if isinstance(item, ast.EmitIf):
            self._emit_if(item)
            return
        if isinstance(item, ast.FragmentCall):  # left in place only when it does not resolve
            ctx.report(error(f"`{item.name}(...)` is not a fragment visible here with {len(item.args)} "
                             f"argument(s) and {len(item.binders.names)} result(s)",
                             span=self._at(item.span, item.name), code="unknown-fragment",
                             hint="fragments are defined with `fragment NAME(params) -> results { ... }` in a file "
                                  "of the same pack (another pack's as `pack.name(...)`); a `k: op` parameter is "
                                  "passed an op type such as `qnn.Relu`"))
            for a in item.args:  # still look at the arguments and bind the results: no follow-on noise
                if a.kind == "expr" and a.expr is not None:
                    self.typer.infer(a.expr)
                elif a.kind != "op":
                    self._arg(a)
            self._emit_binders(item.binders)
            return
        if isinstance(item, ast.EmitLet):
            t = self.typer.infer(item.expr)
            self._define(item.name, "let", t, self._at(item.span, item.name, after="let"))
            return
        if isinstance(item, ast.EmitOp):
            if item.op_expr is not None:
                self._dynamic_op(item)
            else:
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
            fresh = [n for n in item.binders.names if n != "_" and n not in self.results]
            if item.props and (len(fresh) > 1 or item.binders.rest):
                # props type the new results (root results keep their types): with two or more they would
                # type all alike, e.g. TopK's values as its int indices
                ctx.report(error(f"`: shape/dtype/encoding` would apply to every new result of this op "
                                 f"({', '.join(fresh) or '...'}); give them where one new result is bound",
                                 span=item.props[0].span or item.span,
                                 hint="let shape inference type the results, or emit a Cast of the one result",
                                 code="props-on-many-results"))
        elif isinstance(item, ast.EmitAlias):
            src = ast.Name(item.source, span=self._at(item.span, item.source, after="="))
            self._value_arg(src)
            if len(item.binders.names) != 1 or item.binders.rest:
                ctx.report(error("an alias binds exactly one name", span=item.binders.span, code="result-arity"))
        else:
            self.typer.expect(item.expr, "tensor", "`tensor(...)` data")
            ctx.check_props(item.props, self.typer)
        if getattr(item, "default", False):
            self._default_binders(item.binders)
        else:
            self._emit_binders(item.binders)
        if isinstance(item, ast.EmitOp) and item.fold:
            self._fold(item)

    def _dynamic_op(self, item: ast.EmitOp) -> None:
        """An op type given per match (`k: op` passed an expression): a string. When the op types it can
        have are known (`optypes`: literals, `optype(v)` of a matched value, picks among them), each is
        checked as the op, every finding saying which one it is about; otherwise it is checked when the
        rule emits."""
        ctx = self.ctx
        self.typer.expect(item.op_expr, "str", "an op type")
        for a in item.args:
            self._arg(a)
        for p in item.params:  # typed once; each op type below only checks its own params
            self.typer.infer(p.expr)
        options = self.op_types.get(id(item))
        if options is not None:
            quiet = ExprTyper(ctx.functions, lambda d: None, self.typer.lookup, self.typer.candidates,
                              self.typer.later)
            quiet.defines, quiet.recursive = self.typer.defines, self.typer.recursive
            text = format_expr(item.op_expr)
            what = text if len(text) <= 40 else f"the op type `{item.op}`"
            at = item.op_expr.span or item.span
            for op in options:
                since = len(ctx.diagnostics)
                if not ctx.is_target(op):
                    ctx.report(error(f"`{op}` is not a {ctx.dialect}.* op; an op type given per match emits "
                                     f"{ctx.dialect.upper()} ops only", span=at, code="dynamic-source-op",
                                     hint="pass the target op for it, e.g. picked by `optype(...)` from a list"))
                elif (sig := ctx.resolve(op, at)) is not None:
                    ctx.check_args(sig, item.args, item.span)
                    ctx.check_params(sig, item.params, quiet, item.span)
                    ctx.check_results(sig, item.binders, item.binders.span)
                    self.emitted.setdefault(sig.target, sig.name)
                ctx.retell(since, f"when {what} is {op}: ")

    def _optional_names(self) -> set[str]:
        return set(ast.optional_captures(self.rule))

    def _default_binders(self, binders: ast.Binders) -> None:
        """`b ?= ...`: b must be an optional capture `b?`, and is not rebound (it keeps its binding)."""
        optional = self._optional_names()
        for name in binders.names:
            b = self.scope.get(name)
            if name not in optional or binders.rest or len(binders.names) != 1:
                self.ctx.report(error(f"`{name} ?= ...` gives a default to an optional operand, but `{name}` "
                                      "is not captured with `?`", span=self._at(binders.span, name),
                                      hint=f"capture it as `{name}?` in the match, or write `{name} = ...`",
                                      code="default-not-optional"))
            elif b is not None:
                b.used = True

    def _fold(self, item: ast.EmitOp) -> None:
        """`y = fold OP(xs...)`: one list operand, one result, a two-operand OP."""
        if len(item.args) != 1 or item.args[0].kind != "rest":
            self.ctx.report(error(f"`fold {item.op}(...)` takes exactly one list, as `xs...`",
                                  span=self._at(item.span, item.op), code="fold-args"))
        if len(item.binders.names) != 1 or item.binders.rest:
            self.ctx.report(error("`fold` binds exactly one result", span=item.binders.span, code="result-arity"))

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

    def _backend_decided(self) -> None:
        """Warn about an `if` or `require` that `backend()` decides alike on every backend of the rule:
        a branch never taken there (a rule for `cpu` asking `backend() == "htp"`)."""
        r = self.rule
        on = tuple(b for b in (r.backends or BACKENDS) if b in BACKENDS)
        if not on or not mentions_backend(r.body):
            return
        where = ", ".join(on)

        def same(e: ast.Expr) -> bool | None:
            if not mentions_backend(e):
                return None
            got = {decide(e, b) for b in on}
            return next(iter(got)) if len(got) == 1 else None

        def items(its) -> None:
            for i in its:
                if not isinstance(i, ast.EmitIf):
                    continue
                v = same(i.cond)
                if v is False:
                    self.ctx.report(warning(f"this `if` is false on every backend rule `{r.name}` is for ({where}): "
                                            "its branch is never taken", span=i.cond.span, code="backend-decided"))
                elif v is True and i.otherwise:
                    self.ctx.report(warning(f"this `if` is true on every backend rule `{r.name}` is for ({where}): "
                                            "its `else` is never taken", span=i.cond.span, code="backend-decided"))
                items(i.then)
                items(i.otherwise)

        for s in r.body:
            if isinstance(s, ast.Require) and same(s.expr) is False:
                self.ctx.report(warning(f"this `require` is false on every backend rule `{r.name}` is for ({where}): "
                                        "the rule never applies", span=s.expr.span, code="backend-decided"))
            elif isinstance(s, ast.Emit):
                items(s.items)
