"""Checks one test block: the rule it tests, its inputs, its source graph and its expectations."""

from __future__ import annotations

from qlower.diagnostics import Note, Span, error
from qlower.graph.types import canonical_dtype
from qlower.lang import ast
from qlower.lang.checker_sigs import Context
from qlower.lang.checker_types import DTYPE_CONSTANTS, ExprTyper, suggest
from qlower.lang.names import resolve_rule


class TestChecker:
    """Test names are values (inputs, constants, graph results), bound in order."""

    __test__ = False  # not a pytest class

    def __init__(self, ctx: Context, test: ast.Test, namespace: str = ""):
        self.ctx = ctx
        self.test = test
        self.namespace = namespace
        self.values: dict[str, Span | None] = {}
        self.typer = ExprTyper(ctx.functions, ctx.report, self._lookup, lambda: list(self.values))

    def _lookup(self, name: str, span: Span | None) -> str | None:
        return "value" if name in self.values else None

    def _at(self, span: Span | None, name: str, after: str | None = None) -> Span | None:
        return self.ctx.locate.find(span, name, after)

    def run(self) -> None:
        t, ctx = self.test, self.ctx
        ctx.check_backends(t.backends, t.span)
        if t.rule is not None:
            self._rule_ref(t.rule, self._at(t.span, t.rule, after="for"))
        elif resolve_rule(t.name, self.namespace, ctx.rules) is None:
            ctx.report(error(f"no rule named `{t.name}` to test", span=self._at(t.span, t.name, after="test"),
                             hint=suggest(t.name, self._rule_names()) or f"write `test {t.name} for RULE`",
                             code="unknown-rule"))
        has_graph = False
        for s in t.body:
            if isinstance(s, (ast.TestInput, ast.TestConst)):
                self._tensor_type(s.type)
                if isinstance(s, ast.TestConst) and s.value is not None:
                    self.typer.expect(s.value, "tensor", "a constant's value")
                self.ctx.check_props(s.props, self.typer)
                self._encoded_float(s)
                self._define(s.name, self._at(s.span, s.name))
            elif isinstance(s, ast.TestGraph):
                has_graph = True
                for node in s.nodes:
                    self._node(node)
            elif s.kind == "ops":
                for op in s.ops:
                    ctx.resolve(op, self._at(s.span, op))
            elif s.kind == "rule" and s.text is not None:
                self._rule_ref(s.text, self._at(s.span, s.text, after="rule"))
        if not has_graph:
            ctx.report(error(f"test `{t.name}` has no `graph`", span=self._at(t.span, t.name, after="test"),
                             code="test-no-graph"))

    def _rule_names(self) -> list[str]:
        """Rule names as this test may write them: its own pack's unqualified, every rule qualified."""
        own = f"{self.namespace}." if self.namespace else None
        return [*(k[len(own):] for k in self.ctx.rules if own and k.startswith(own)), *self.ctx.rules]

    def _rule_ref(self, name: str, span: Span | None) -> None:
        if resolve_rule(name, self.namespace, self.ctx.rules) is None:
            self.ctx.report(error(f"unknown rule `{name}`", span=span, hint=suggest(name, self._rule_names()),
                                  code="unknown-rule"))

    def _define(self, name: str, span: Span | None) -> None:
        if name == "_":
            return
        if name in self.values:
            self.ctx.report(error(f"`{name}` is already defined in this test", span=span, code="redefined",
                                  notes=[Note("defined here", self.values[name])]))
            return
        self.values[name] = span

    def _encoded_float(self, s: ast.TestInput | ast.TestConst) -> None:
        """An encoding maps integer storage to reals: a float tensor has none to give."""
        dtype = canonical_dtype(s.type.dtype)
        if dtype is None or not dtype.startswith(("float", "bfloat")):
            return
        for p in s.props:
            if p.kind == "encoding":
                self.ctx.report(error(f"`{s.name}` is {s.type.dtype}, which takes no encoding: a quantized tensor has "
                                      "integer storage", span=p.span, code="encoded-float",
                                      hint=f"write e.g. `u8[...] : encoding ...` (or drop the encoding for a real-valued "
                                           f"{s.type.dtype} tensor)"))

    def _tensor_type(self, tt: ast.TensorType) -> None:
        if canonical_dtype(tt.dtype) is None:
            self.ctx.report(error(f"unknown dtype `{tt.dtype}`", span=self._at(tt.span, tt.dtype),
                                  hint=suggest(tt.dtype, DTYPE_CONSTANTS), code="unknown-dtype"))
        for d in tt.dims:
            if d.hi is not None and d.lo > d.hi:
                self.ctx.report(error(f"dim range {d.lo}..{d.hi} is empty", span=d.span,
                                      hint=f"write {d.hi}..{d.lo}", code="dim-range"))

    def _node(self, node: ast.GraphNode) -> None:
        op_span = self._at(node.span, node.op)
        sig = self.ctx.resolve(node.op, op_span)  # QNN ops too: they are what cleanup rules rewrite
        for a in node.args:
            if a.kind == "value" and a.name not in self.values:
                self.ctx.report(error(f"undefined name `{a.name}`", span=a.span, code="undefined-name",
                                      hint=suggest(a.name or "", self.values)))
        if sig is not None:
            self.ctx.check_args(sig, node.args, op_span)
            self.ctx.check_params(sig, node.params, self.typer, op_span)
            self.ctx.check_results(sig, node.binders, node.binders.span)
        else:
            for p in node.params:
                self.typer.infer(p.expr)
        self.ctx.check_props(node.props, self.typer)
        for name in node.binders.names:
            self._define(name, self._at(node.binders.span, name))
