"""Shared checker state: op signatures, name locations and the checks rules and tests share.

Source ops (declared in .qpat) and QNN ops (from the target registry) are
both seen as an `OpSig` — operand and result count ranges plus typed
attributes/params — so arity and parameter checks are written once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import attrs

from qlower.diagnostics import Diagnostic, Note, Severity, SourceCache, Span, error
from qlower.graph.types import canonical_dtype
from qlower.lang import ast
from qlower.lang.checker_types import (ATTR_TYPES, ExprTyper, assignable, dtype_literal_ok, literal_type, suggest,
                                       suggest_name, unknown_backend)
from qlower.lang.registry import TargetParam, TargetRegistry
from qlower.lang.functions import FunctionTable
from qlower.qnn.backends import BACKENDS


@attrs.frozen
class AttrSig:
    name: str
    type: str
    required: bool = False  # must be given: mandatory and without a default
    enum: tuple[str, ...] | None = None
    span: Span | None = None


@attrs.frozen
class OpSig:
    name: str  # qualified: mllm.Repeat, qnn.MatMul
    target: bool
    inputs: tuple[int, int | None]
    outputs: tuple[int, int | None]
    attrs: Mapping[str, AttrSig]
    span: Span | None = None

    @property
    def word(self) -> str:
        return "param" if self.target else "attribute"


def _rng(lo: int, hi: int | None) -> str:
    return str(lo) if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")


def _count(n: str, word: str) -> str:
    return f"{n} {word}" + ("" if n == "1" else "s")


def source_sig(decl: ast.OpDecl) -> OpSig:
    """A declared op's signature; an attribute without default must be given (in emits and test graphs)."""
    kinds = [o.kind for o in decl.operands]
    ones = kinds.count("one")
    hi = None if "variadic" in kinds else ones + kinds.count("optional")
    fixed = sum(1 for r in decl.results if not r.variadic)
    rhi = None if any(r.variadic for r in decl.results) else fixed
    attrs_ = {a.name: AttrSig(a.name, str(a.type) if str(a.type) in ATTR_TYPES else "any", a.default is None,
                              span=a.span) for a in decl.attrs}
    return OpSig(decl.op, False, (ones, hi), (fixed, rhi), attrs_, decl.span)


def target_param_type(p: TargetParam) -> str:
    """The expression type a QNN param takes: scalar by datatype, nested lists by rank, `any` when open."""
    dt = p.datatype.name if p.datatype is not None else ""
    if p.enum:
        base = "int"
    elif dt == "BOOL_8":
        base = "bool"
    elif dt == "STRING":
        base = "str"
    elif dt.startswith(("INT", "UINT")):
        base = "int"
    elif dt.startswith(("FLOAT", "BFLOAT")):
        base = "float"
    elif "FIXED" in dt:
        base = "number"
    else:
        return "any"
    rank = p.rank
    if rank in ("SCALAR", "0D"):
        return base
    if rank[:1].isdigit():
        for _ in range(int(rank[0])):
            base = f"list[{base}]"
        return base
    return "any"


_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?|[:=]')


class Locator:
    """Narrows a node's span to a name inside it (most nodes' spans start elsewhere).

    Each source line is tokenized once, so locating stays cheap on large rule sets.
    """

    def __init__(self, sources: SourceCache | None):
        self.sources = sources
        self._tokens: dict[tuple[str, int], list[tuple[str, int, int]] | None] = {}

    def _line(self, file: str, ln: int) -> list[tuple[str, int, int]] | None:
        key = (file, ln)
        if key not in self._tokens:
            text = self.sources.line(file, ln) if self.sources is not None else None
            self._tokens[key] = None if text is None else [(m[0], m.start(), m.end()) for m in _TOKEN.finditer(text)]
        return self._tokens[key]

    def find(self, span: Span | None, needle: str, after: str | None = None) -> Span | None:
        """The first `needle` token inside `span` (after the token `after`, if given); else `span`."""
        if self.sources is None or span is None:
            return span
        for ln in range(span.line, min(span.end_line, span.line + 50) + 1):
            tokens = self._line(span.file, ln)
            if tokens is None:
                break
            start = span.column - 1 if ln == span.line else 0
            end = span.end_column - 1 if ln == span.end_line else 1 << 30
            for text, s, e in tokens:
                if s < start or e > end:
                    continue
                if after is not None:
                    if text == after:
                        after = None
                elif text == needle:
                    return Span(span.file, ln, s + 1, ln, e + 1)
        return span


@attrs.define
class Context:
    """Everything one `check` call needs; holds this call's findings."""

    registry: TargetRegistry
    functions: FunctionTable
    locate: Locator
    decls: dict[str, ast.OpDecl] = attrs.field(factory=dict)
    rules: dict[str, ast.Rule] = attrs.field(factory=dict)
    defines: dict[str, int] = attrs.field(factory=dict)  # every `def` by name → its parameter count
    # defs that call themselves (directly or through other defs): reported at the def, so a call of one
    # is not reported again where it is used
    recursive_defs: set[str] = attrs.field(factory=set)
    diagnostics: list[Diagnostic] = attrs.field(factory=list)
    _sigs: dict[str, OpSig | None] = attrs.field(factory=dict)
    _target_names: list[str] | None = None
    errors: int = 0  # error findings so far

    @property
    def dialect(self) -> str:
        """The target dialect (`qnn`): the registry's, never spelled out in the checker."""
        return self.registry.dialect

    def is_target(self, qname: str) -> bool:
        """Is `qname` (`qnn.MatMul`) an op of the target dialect?"""
        return qname.partition(".")[0] == self.registry.dialect

    def report(self, d: Diagnostic) -> None:
        self.diagnostics.append(d)
        self.errors += d.is_error

    def retell(self, since: int, prefix: str) -> None:
        """Prefix the findings reported since `since` (a count of them) with `prefix`: which of several
        op types an item can have they are about."""
        for i in range(since, len(self.diagnostics)):
            d = self.diagnostics[i]
            self.diagnostics[i] = attrs.evolve(d, message=prefix + d.message)

    def note(self, message: str, span: Span | None, code: str) -> None:
        self.report(Diagnostic(Severity.NOTE, message, span=span, code=code))

    def sig(self, qname: str) -> OpSig | None:
        """The signature of a declared source op or a registry QNN op; None if unknown."""
        if qname not in self._sigs:
            dialect, _, name = qname.partition(".")
            if dialect == self.registry.dialect:
                op = self.registry.op(name)
                self._sigs[qname] = None if op is None else OpSig(
                    qname, True, op.input_count_range(), op.output_count_range(),
                    {p.name: AttrSig(p.name, target_param_type(p), p.mandatory and p.default is None,
                                     tuple(p.enum) if p.enum else None) for p in op.params})
            else:
                decl = self.decls.get(qname)
                self._sigs[qname] = source_sig(decl) if decl is not None else None
        return self._sigs[qname]

    def resolve(self, qname: str, span: Span | None, *, source_only: bool = False) -> OpSig | None:
        """`sig` that reports an unknown op (with a did-you-mean) at `span`."""
        target = self.is_target(qname)
        sig = None if source_only and target else self.sig(qname)
        if sig is not None:
            return sig
        if target and not source_only:
            if self._target_names is None:
                self._target_names = [f"{self.dialect}.{n}" for n in self.registry.names()]
            self.report(error(f"unknown {self.dialect.upper()} op `{qname}`", span=span,
                              hint=suggest(qname, self._target_names), code="unknown-target-op"))
        else:
            hint = suggest(qname, self.decls)
            if hint is None and target:
                hint = "test graphs hold source ops only"
            self.report(error(f"unknown op `{qname}`", span=span, hint=hint, code="unknown-op"))
        return None

    # -------------------------------------------------------- shared checks

    def check_backends(self, names: Sequence[str] | None, span: Span | None) -> None:
        for b in names or ():
            if b not in BACKENDS:
                self.report(unknown_backend(b, self.locate.find(span, b, after="backends")))

    def check_arity(self, sig: OpSig, n_fixed: int, open_: bool, span: Span | None) -> None:
        """`n_fixed` operands, plus any number more when `open_` (a rest capture or `xs...` arg)."""
        lo, hi = sig.inputs
        word = "input" if sig.target else "operand"
        if (not open_ and n_fixed < lo) or (hi is not None and n_fixed > hi):
            got = f"at least {n_fixed}" if open_ else str(n_fixed)
            self.report(error(f"{sig.name} takes {_count(_rng(lo, hi), word)}, got {got}", span=span,
                              code="arity"))

    def check_results(self, sig: OpSig, binders: ast.Binders, span: Span | None) -> None:
        n = len(binders.names)
        lo, hi = sig.outputs
        if binders.rest or n == 0:
            if binders.rest and hi is not None and hi < 1:
                self.report(error(f"{sig.name} has no results", span=span, code="result-arity"))
            return
        if n < lo or (hi is not None and n > hi):
            self.report(error(f"{sig.name} has {_count(_rng(lo, hi), 'result')}, {n} bound", span=span,
                              code="result-arity"))

    def check_args(self, sig: OpSig, args: Sequence[ast.Arg], span: Span | None) -> None:
        """Emitted-op or graph-node operands against the op's count range and mandatory slots."""
        fixed = [a for a in args if a.kind != "rest"]
        rest = len(fixed) != len(args)
        self.check_arity(sig, len(fixed), rest, span)
        if not rest:
            for i, a in enumerate(args):
                if a.kind == "none" and i < sig.inputs[0]:
                    word = "input" if sig.target else "operand"
                    self.report(error(f"`_` cannot stand for mandatory {word} {i} of {sig.name}", span=a.span,
                                      code="absent-mandatory"))

    def check_params(self, sig: OpSig, params: Sequence[ast.Param], typer: ExprTyper, span: Span | None) -> None:
        """Params of an emitted op (or attributes of a graph node): known, typed, in range, complete."""
        seen: dict[str, ast.Param] = {}
        misspelt: set[str] = set()  # required names an unknown param was probably meant as
        for p in params:
            name_span = self.locate.find(p.span, p.name)
            if p.name in seen:
                self.report(error(f"{sig.word} `{p.name}` is given twice", span=name_span, code="duplicate-param",
                                  notes=[Note("first given here", self.locate.find(seen[p.name].span, p.name))]))
                continue
            seen[p.name] = p
            a = sig.attrs.get(p.name)
            if a is None:
                typer.infer(p.expr)
                close = suggest_name(p.name, sig.attrs)
                misspelt.update([close] if close else [])
                self.report(error(f"unknown {sig.word} `{p.name}` for {sig.name}", span=name_span,
                                  hint=f"did you mean `{close}`?" if close else None,
                                  code="unknown-param" if sig.target else "unknown-attr"))
                continue
            t = typer.infer(p.expr)
            if a.enum and isinstance(p.expr, ast.Literal):
                self.check_enum(sig, a, p.expr)
            elif a.enum and t == "str":
                pass  # an enum name computed at lowering time
            elif not (a.type == "dtype" and dtype_literal_ok(p.expr)) and not assignable(t, a.type):
                self.report(error(f"{sig.word} `{p.name}` of {sig.name} is {a.type}, not {t}", span=p.expr.span,
                                  code="param-type" if sig.target else "attr-type"))
        for a in sig.attrs.values():
            if a.required and a.name not in seen and a.name not in misspelt:
                self.report(error(f"missing {sig.word} `{a.name}` for {sig.name}", span=span,
                                  code="missing-param" if sig.target else "missing-attr"))

    def check_enum(self, sig: OpSig, a: AttrSig, e: ast.Literal) -> None:
        """A literal enum param: a name (any case) or an index into the enum."""
        enum = a.enum or ()
        v = e.value
        if isinstance(v, str):
            if v.upper() not in (x.upper() for x in enum):
                self.report(error(f"`{v}` is not a value of {sig.word} `{a.name}` of {sig.name}", span=e.span,
                                  hint=suggest(v, enum) or f"one of {', '.join(enum)}", code="param-enum"))
        elif isinstance(v, int) and not isinstance(v, bool):
            if not 0 <= v < len(enum):
                self.report(error(f"{v} is out of range for {sig.word} `{a.name}` of {sig.name} "
                                  f"(0..{len(enum) - 1})", span=e.span, hint=f"one of {', '.join(enum)}",
                                  code="param-enum"))
        else:
            self.report(error(f"{sig.word} `{a.name}` of {sig.name} is an enum (a name or int), not "
                              f"{literal_type(v)}", span=e.span, code="param-type"))

    def check_props(self, props: Sequence[ast.ValueProp], typer: ExprTyper) -> None:
        seen: dict[str, ast.ValueProp] = {}
        want = {"shape": "list[int]", "dtype": "dtype", "encoding": "encoding"}
        for p in props:
            if p.kind in seen:
                self.report(error(f"`{p.kind}` is given twice", span=p.span, code="duplicate-prop",
                                  notes=[Note("first given here", seen[p.kind].span)]))
            seen[p.kind] = p
            typer.expect(p.expr, want[p.kind], f"`{p.kind}`")


_LITERAL_FITS = {"int": {"int"}, "float": {"int", "float"}, "number": {"int", "float"}, "bool": {"bool"},
                 "str": {"str"}}


def attr_literal_ok(a: AttrSig, value: object) -> bool:
    """Does a pattern literal fit the attribute's type? (`none` matches an absent attribute.)"""
    if value is None or a.type == "any":
        return True
    if a.type == "dtype":
        return isinstance(value, str) and canonical_dtype(value) is not None
    if a.enum and isinstance(value, str):
        return True
    return literal_type(value) in _LITERAL_FITS.get(a.type, ())
