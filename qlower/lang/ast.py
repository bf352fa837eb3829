"""The .qpat syntax tree: small frozen attrs classes, each with its source span.

Spans are excluded from equality, so two trees are equal when they say the
same thing: `parse(format(x)) == parse(x)` is a meaningful check.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, Union

import attrs

from qlower.diagnostics import Span


def _span() -> attrs.Attribute:
    return attrs.field(eq=False, repr=False, default=None, kw_only=True)


node = attrs.frozen


@functools.cache
def _is_node_type(t: type) -> bool:
    return attrs.has(t) and not issubclass(t, Span)


def _is_node(v: Any) -> bool:
    return _is_node_type(type(v))


@functools.cache
def _field_names(t: type) -> tuple[str, ...]:
    """The fields of node type `t` that can hold nodes (every field but spans and docs)."""
    return tuple(f.name for f in attrs.fields(t) if f.name not in ("span", "doc"))


def child_nodes(x: Any) -> Iterator[Any]:
    """The nodes directly inside node `x`: fields that are nodes, and the nodes in tuple fields."""
    for name in _field_names(type(x)):
        v = getattr(x, name)
        if isinstance(v, tuple):
            yield from (i for i in v if _is_node_type(type(i)))
        elif _is_node_type(type(v)):
            yield v


def iter_nodes(x: Any) -> Iterator[Any]:
    """`x` (a node, a tuple of nodes, or None) and every node inside it, each before its children: the one
    walk behind the searches over a tree (a call of `backend()`, of a def, a name a def uses)."""
    stack = list(reversed(x)) if isinstance(x, tuple) else [x]
    while stack:
        n = stack.pop()
        if _is_node_type(type(n)):
            yield n
            stack.extend(reversed(tuple(child_nodes(n))))


def map_children(x: Any, fn: Callable[[Any], Any]) -> Any:
    """Node `x` with `fn` applied to each node directly inside it (alone or in a tuple of nodes): the one
    rebuild behind rewrites of a tree (inlining, `backend()` decided). `x` itself when `fn` changes none."""
    changes = {}
    for f in attrs.fields(type(x)):
        v = getattr(x, f.name)
        if isinstance(v, tuple) and v and _is_node(v[0]):
            new = tuple(fn(i) for i in v)
            if any(a is not b for a, b in zip(new, v)):
                changes[f.name] = new
        elif _is_node(v):
            new = fn(v)
            if new is not v:
                changes[f.name] = new
    return attrs.evolve(x, **changes) if changes else x

# ----------------------------------------------------------------- expressions


@node
class Literal:
    value: int | float | str | bool | None
    span: Span = _span()


@node
class Name:
    id: str
    span: Span = _span()


@node
class ListExpr:
    items: tuple[Expr, ...]
    span: Span = _span()


@node
class Call:
    func: str
    args: tuple[Expr, ...]
    span: Span = _span()


@node
class Index:
    target: Expr
    index: Expr
    span: Span = _span()


@node
class Slice:
    target: Expr
    lo: Expr | None
    hi: Expr | None
    span: Span = _span()


@node
class Unary:
    op: str  # "-" or "not"
    operand: Expr
    span: Span = _span()


@node
class Binary:
    op: str  # + - * / // % ++ == != < <= > >= in "not in" and or
    left: Expr
    right: Expr
    span: Span = _span()


@node
class Conditional:
    then: Expr
    cond: Expr
    otherwise: Expr
    span: Span = _span()


Expr = Union[Literal, Name, ListExpr, Call, Index, Slice, Unary, Binary, Conditional]

# ---------------------------------------------------------------- declarations


@node
class TypeRef:
    name: str
    arg: TypeRef | None = None
    span: Span = _span()

    def __str__(self) -> str:
        return f"{self.name}[{self.arg}]" if self.arg else self.name


@node
class OperandDecl:
    name: str
    kind: str  # "one" | "optional" | "variadic"
    span: Span = _span()


@node
class ResultDecl:
    name: str
    variadic: bool = False
    span: Span = _span()


@node
class AttrDecl:
    name: str
    type: TypeRef
    default: Expr | None = None
    span: Span = _span()


@node
class OpDecl:
    op: str  # dialect-qualified, e.g. "mllm.Repeat"
    operands: tuple[OperandDecl, ...]
    results: tuple[ResultDecl, ...]
    attrs: tuple[AttrDecl, ...] = ()
    commutative: bool = False
    doc: str | None = None
    span: Span = _span()

    @property
    def dialect(self) -> str:
        return self.op.split(".", 1)[0]


@node
class ComputeDecl:
    """QNN ops whose datatypes the backend lacks compute in `target` behind Casts (`compute ... as ...`)."""

    sources: tuple[str, ...]  # dtype names as written
    target: str
    ops: tuple[str, ...] = ()  # qnn.* op types it is limited to; () = every op
    backends: tuple[str, ...] | None = None
    doc: str | None = None
    span: Span = _span()
    wrapping: bool = False  # integer results wrap into the source type (two's complement), as ONNX's do


@node
class Import:
    target: str
    is_path: bool
    span: Span = _span()


# -------------------------------------------------------------------- patterns


@node
class DimPat:
    kind: str  # "int" | "capture" | "any" | "rest"
    value: int | str | None = None
    span: Span = _span()


@node
class ValueType:
    const: bool = False
    dtype: str | None = None
    shape: tuple[DimPat, ...] | None = None
    span: Span = _span()


@node
class Capture:
    name: str
    type: ValueType | None = None
    optional: bool = False  # `b?`: an optional operand; `b` is none when the op has no such operand
    span: Span = _span()


@node
class Wildcard:
    type: ValueType | None = None
    span: Span = _span()


@node
class RestCapture:
    name: str
    span: Span = _span()


@node
class AttrPat:
    name: str
    kind: str  # "capture" | "any" | "literal"
    value: str | int | float | bool | None = None
    span: Span = _span()


@node
class OpPattern:
    op_types: tuple[str, ...]
    operands: tuple[OperandPat, ...]
    attrs: tuple[AttrPat, ...] = ()
    commutative: bool = False
    shared: bool = False
    span: Span = _span()


@node
class NamedNested:
    name: str
    pattern: OpPattern
    span: Span = _span()


@node
class Alternatives:
    options: tuple[OperandPat, ...]
    span: Span = _span()


OperandPat = Union[Capture, Wildcard, RestCapture, OpPattern, NamedNested, Alternatives]


@node
class Binders:
    """Names bound to an op's results: `y`, `a, b`, `ys...` (rest) or `_`."""

    names: tuple[str, ...]
    rest: bool = False
    span: Span = _span()


# ------------------------------------------------------------------ statements


@node
class Match:
    binders: Binders
    pattern: OpPattern
    span: Span = _span()


@node
class Require:
    expr: Expr
    span: Span = _span()


@node
class Let:
    name: str
    expr: Expr
    span: Span = _span()


@node
class Fail:
    message: Expr
    span: Span = _span()


@node
class Param:
    name: str
    expr: Expr
    span: Span = _span()


@node
class ValueProp:
    kind: str  # "shape" | "dtype" | "encoding"
    expr: Expr
    span: Span = _span()


@node
class Arg:
    """An emitted op's operand: a value name, `xs...`, `_` (absent) or `tensor(expr)`."""

    kind: str  # "value" | "rest" | "none" | "tensor"
    name: str | None = None
    expr: Expr | None = None
    span: Span = _span()


@node
class EmitOp:
    binders: Binders
    op: str
    args: tuple[Arg, ...]
    params: tuple[Param, ...] = ()
    props: tuple[ValueProp, ...] = ()
    # `y = fold qnn.ElementWiseAdd(xs...)`: a left-leaning chain of the binary op over the list
    fold: bool = False
    # `b ?= ...`: only emitted when `b` (an optional operand) is absent
    default: bool = False
    span: Span = _span()
    # An op type known only per match (a fragment's `k: op` parameter given an expression such as
    # `optype(y)`): evaluated when the rule emits; `op` then holds its text for messages.
    op_expr: Expr | None = None


@node
class EmitAlias:
    binders: Binders
    source: str
    default: bool = False
    span: Span = _span()


@node
class EmitTensor:
    binders: Binders
    expr: Expr
    props: tuple[ValueProp, ...] = ()
    default: bool = False
    span: Span = _span()


@node
class EmitLet:
    """`let name = expr` inside an emit block: may use values emitted above it."""

    name: str
    expr: Expr
    span: Span = _span()


@node
class FragmentCall:
    """`r = NAME(args)`: a fragment's emit items inlined here (args: values, `xs...`, expressions)."""

    binders: Binders
    name: str  # a fragment of the pack, `pack.name` of another pack's, or a `k: op` parameter
    # kind "rest" (`xs...`), "op" (a qualified op type, `qnn.Relu`) or "expr" (anything else, a plain name included)
    args: tuple[Arg, ...]
    span: Span = _span()
    params: tuple[Param, ...] = ()  # only for a `k: op` parameter's op
    props: tuple[ValueProp, ...] = ()


@node
class EmitIf:
    """`if COND { items } else { items }` in an emit block: COND is evaluated per match and picks
    the branch whose items are emitted; a name used after it must be bound by both branches."""

    cond: Expr
    then: tuple[EmitItem, ...]
    otherwise: tuple[EmitItem, ...] = ()
    span: Span = _span()


EmitItem = Union[EmitOp, EmitAlias, EmitTensor, EmitLet, FragmentCall, EmitIf]


def flat_items(items) -> tuple:
    """Emit items with each `if`'s branches spliced in (both of them), for walks over every item."""
    out: list = []
    for i in items:
        if isinstance(i, EmitIf):
            out.extend(flat_items(i.then))
            out.extend(flat_items(i.otherwise))
        else:
            out.append(i)
    return tuple(out)


@node
class Emit:
    items: tuple[EmitItem, ...]
    # Layout only (`emit { ... }` over several lines vs `emit item`); the formatter
    # may change it (e.g. when wrapping a long item), so it is not part of equality.
    block: bool = attrs.field(default=True, eq=False)
    span: Span = _span()


Stmt = Union[Match, Require, Let, Fail, Emit]


@node
class Rule:
    name: str
    body: tuple[Stmt, ...]
    benefit: int | None = None
    backends: tuple[str, ...] | None = None
    doc: str | None = None
    overrides: str | None = None  # `rule r overrides mllm.gelu`: r replaces that rule of an imported pack
    span: Span = _span()

    @property
    def matches(self) -> tuple[Match, ...]:
        return tuple(s for s in self.body if isinstance(s, Match))

    @property
    def emits(self) -> tuple[EmitItem, ...]:
        """Every emit item, both branches of each `if` spliced in."""
        return tuple(i for s in self.body if isinstance(s, Emit) for i in flat_items(s.items))


def optional_captures(rule: Rule) -> list[str]:
    """Names of a rule's `b?` captures, nested patterns included."""
    out: list[str] = []

    def walk(p) -> None:
        if isinstance(p, Capture) and p.optional:
            out.append(p.name)
        elif isinstance(p, OpPattern):
            for o in p.operands:
                walk(o)
        elif isinstance(p, NamedNested):
            walk(p.pattern)
        elif isinstance(p, Alternatives):
            for o in p.options:
                walk(o)

    for m in rule.matches:
        walk(m.pattern)
    return out


# ----------------------------------------------------------------------- tests


@node
class DimRange:
    lo: int
    hi: int | None = None
    span: Span = _span()


@node
class TensorType:
    dtype: str
    dims: tuple[DimRange, ...]
    span: Span = _span()


@node
class TestInput:
    name: str
    type: TensorType
    props: tuple[ValueProp, ...] = ()
    span: Span = _span()


@node
class TestConst:
    name: str
    type: TensorType
    value: Expr | None = None
    props: tuple[ValueProp, ...] = ()
    span: Span = _span()


@node
class GraphNode:
    binders: Binders
    op: str
    args: tuple[Arg, ...]
    params: tuple[Param, ...] = ()
    props: tuple[ValueProp, ...] = ()
    span: Span = _span()


@node
class TestGraph:
    nodes: tuple[GraphNode, ...]
    block: bool = attrs.field(default=False, eq=False)  # layout only, like Emit.block
    span: Span = _span()


@node
class Expect:
    kind: str  # "ops" | "no_ops" | "close" | "error" | "rule"
    ops: tuple[str, ...] = ()
    tolerances: tuple[tuple[str, float], ...] = ()
    text: str | None = None
    span: Span = _span()


TestStmt = Union[TestInput, TestConst, TestGraph, Expect]


@node
class Test:
    name: str
    body: tuple[TestStmt, ...]
    rule: str | None = None
    backends: tuple[str, ...] | None = None
    doc: str | None = None
    span: Span = _span()

    @property
    def rule_name(self) -> str:
        return self.rule or self.name


@node
class Comment:
    line: int
    text: str
    own_line: bool = True  # False for a comment trailing code on its line


@node
class MapDecl:
    """`map [name:] PATTERN -> OP(args) {params}`: a 1:1 rule on one line; its result is `y`.

    With `tested TYPE` it also carries a generated test: every captured operand an input of
    that type, the source op with the pattern's literal attributes, `expect ops OP` and
    `expect close`."""

    name: str | None
    pattern: OpPattern
    op: str
    args: tuple[Arg, ...]
    params: tuple[Param, ...] = ()
    benefit: int | None = None
    backends: tuple[str, ...] | None = None
    overrides: str | None = None
    test_type: TensorType | None = None
    doc: str | None = None
    span: Span = _span()
    # built once, so the rule keeps its identity (the checker and engine index rules by object)
    _rule: Rule = attrs.field(init=False, eq=False, repr=False)
    _test: Test | None = attrs.field(init=False, eq=False, repr=False)

    @_rule.default
    def _make_rule(self) -> Rule:
        return self._build_rule()

    @_test.default
    def _make_test(self) -> Test | None:
        return self._build_test()

    @property
    def rule(self) -> Rule:
        return self._rule

    @property
    def test(self) -> Test | None:
        return self._test

    @property
    def rule_name(self) -> str:
        """The given name, else the source op's name in lower case (`mllm.ReLU` → `relu`)."""
        return self.name or self.pattern.op_types[0].split(".", 1)[1].lower()

    def _build_rule(self) -> Rule:
        binders = Binders(("y",), span=self.span)
        body = (Match(binders, self.pattern, span=self.span),
                Emit((EmitOp(binders, self.op, self.args, self.params, span=self.span),), False, span=self.span))
        return Rule(self.rule_name, body, self.benefit, self.backends, self.doc, self.overrides, span=self.span)

    def _build_test(self) -> Test | None:
        if self.test_type is None:
            return None
        names = [o.name for o in self.pattern.operands if isinstance(o, Capture) and not o.optional]
        body: list = [TestInput(n, self.test_type, span=self.span) for n in names]
        params = tuple(Param(a.name, Literal(a.value, span=self.span), span=self.span)
                       for a in self.pattern.attrs if a.kind == "literal")
        args = tuple(Arg("value", n, span=self.span) for n in names)
        body.append(TestGraph((GraphNode(Binders(("y",), span=self.span), self.pattern.op_types[0], args,
                                         params, span=self.span),), span=self.span))
        body.append(Expect("ops", ops=(self.op,), span=self.span))
        body.append(Expect("close", span=self.span))
        return Test(self.rule_name, tuple(body), None, self.backends, span=self.span)


@node
class FragmentParam:
    name: str
    rest: bool = False
    span: Span = _span()
    op: bool = False  # `k: op`: an op type, emitted as `r = k(args)`


@node
class Fragment:
    """`fragment NAME(params) -> results { emit items }`: emit items written once and inlined
    where an emit block calls it; names it binds besides its results stay its own."""

    name: str
    params: tuple[FragmentParam, ...]
    results: tuple[str, ...]
    body: tuple[EmitItem, ...]
    doc: str | None = None
    span: Span = _span()


@node
class Define:
    """`def NAME(params) = expr`: an expression written once per pack (a shared guard, say), called
    from any expression like a function and replaced by its body with the arguments substituted."""

    name: str
    params: tuple[str, ...]
    expr: Expr
    doc: str | None = None
    span: Span = _span()


Item = Union[Import, OpDecl, ComputeDecl, Rule, MapDecl, Fragment, Define, Test]


@node
class Module:
    """One parsed .qpat file."""

    file: str = attrs.field(eq=False)
    items: tuple[Item, ...]
    comments: tuple[Comment, ...] = attrs.field(default=(), eq=False)
    # The rule pack the file belongs to ("" for a user's own file): its rules and tests are named
    # `namespace.name`. Set by the loader, not the parser.
    namespace: str = attrs.field(default="", eq=False)

    @property
    def ops(self) -> tuple[OpDecl, ...]:
        return tuple(i for i in self.items if isinstance(i, OpDecl))

    # The rules with fragments inlined (qlower.lang.fragments), computed once by the parser, which
    # sits above this module; a Module built by hand has its rules as written.
    inlined_rules: tuple | None = attrs.field(default=None, eq=False, repr=False, kw_only=True)

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The file's rules, each `map` line as the rule it stands for, with the file's fragments inlined."""
        if self.inlined_rules is not None:
            return self.inlined_rules
        return tuple(i.rule if isinstance(i, MapDecl) else i for i in self.items if isinstance(i, (Rule, MapDecl)))

    @property
    def fragments(self) -> tuple[Fragment, ...]:
        return tuple(i for i in self.items if isinstance(i, Fragment))

    @property
    def defines(self) -> tuple[Define, ...]:
        return tuple(i for i in self.items if isinstance(i, Define))

    @property
    def tests(self) -> tuple[Test, ...]:
        """The file's tests, with those `map ... tested TYPE` lines generate."""
        return tuple(t for t in (i.test if isinstance(i, MapDecl) else i for i in self.items
                                 if isinstance(i, (Test, MapDecl))) if t is not None)

    @property
    def computes(self) -> tuple[ComputeDecl, ...]:
        return tuple(i for i in self.items if isinstance(i, ComputeDecl))

    @property
    def imports(self) -> tuple[Import, ...]:
        return tuple(i for i in self.items if isinstance(i, Import))
