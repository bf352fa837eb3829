"""The .qpat syntax tree: small frozen attrs classes, each with its source span.

Spans are excluded from equality, so two trees are equal when they say the
same thing: `parse(format(x)) == parse(x)` is a meaningful check.
"""

from __future__ import annotations

from typing import Union

import attrs

from qlower.diagnostics import Span


def _span() -> attrs.Attribute:
    return attrs.field(eq=False, repr=False, default=None, kw_only=True)


node = attrs.frozen

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
    span: Span = _span()


@node
class EmitAlias:
    binders: Binders
    source: str
    span: Span = _span()


@node
class EmitTensor:
    binders: Binders
    expr: Expr
    props: tuple[ValueProp, ...] = ()
    span: Span = _span()


@node
class EmitLet:
    """`let name = expr` inside an emit block: may use values emitted above it."""

    name: str
    expr: Expr
    span: Span = _span()


EmitItem = Union[EmitOp, EmitAlias, EmitTensor, EmitLet]


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
    span: Span = _span()

    @property
    def matches(self) -> tuple[Match, ...]:
        return tuple(s for s in self.body if isinstance(s, Match))

    @property
    def emits(self) -> tuple[EmitItem, ...]:
        return tuple(i for s in self.body if isinstance(s, Emit) for i in s.items)


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


Item = Union[Import, OpDecl, ComputeDecl, Rule, Test]


@node
class Module:
    """One parsed .qpat file."""

    file: str = attrs.field(eq=False)
    items: tuple[Item, ...]
    comments: tuple[Comment, ...] = attrs.field(default=(), eq=False)

    @property
    def ops(self) -> tuple[OpDecl, ...]:
        return tuple(i for i in self.items if isinstance(i, OpDecl))

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(i for i in self.items if isinstance(i, Rule))

    @property
    def tests(self) -> tuple[Test, ...]:
        return tuple(i for i in self.items if isinstance(i, Test))

    @property
    def computes(self) -> tuple[ComputeDecl, ...]:
        return tuple(i for i in self.items if isinstance(i, ComputeDecl))

    @property
    def imports(self) -> tuple[Import, ...]:
        return tuple(i for i in self.items if isinstance(i, Import))
